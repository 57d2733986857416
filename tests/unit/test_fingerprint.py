import hashlib

import httpx
import pytest

from idemclient._fingerprint import fingerprint, fingerprints


def _by_the_formula(method: str, raw_path: bytes, body: bytes) -> str:
    # sha256 over method, path with query, and body, each prefixed by its length
    # (8 bytes, big-endian): the fingerprints already in stores are this.
    digest = hashlib.sha256()
    for part in (method.encode(), raw_path, body):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", "https://psp.test/v1/payments", b'{"amount":100}'),
        ("PATCH", "https://psp.test/", b""),  # no body
        ("POST", "https://psp.test/a%20b?q=1&access_token=", b"\x00" * 300),
    ],
)
def test_one_fingerprint_and_many_agree_with_the_formula(
    method: str, url: str, body: bytes
) -> None:
    parsed = httpx.URL(url)
    expected = _by_the_formula(method, parsed.raw_path, body)
    assert fingerprint(method, parsed, body) == expected
    assert fingerprints(method, parsed)(body) == expected


def test_the_origin_is_not_fingerprinted() -> None:
    body = b"{}"
    assert fingerprint("POST", httpx.URL("https://a.test/p?x=1"), body) == fingerprint(
        "POST", httpx.URL("http://b.test:8080/p?x=1"), body
    )
