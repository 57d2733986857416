"""A request's headers read once (`_frame.read_headers`) are what httpx reads: the
names lowercased, the values decoded as httpx decodes them, repeats kept in order."""

from __future__ import annotations

import httpx
import pytest

from idemclient._frame import read_headers, values_of

GIVEN = {
    "ascii": [("Content-Type", "application/json"), ("Idempotency-Key", "k-1")],
    "repeated": [("Content-Type", "text/plain"), ("X-A", "1"), ("content-type", "a/b")],
    "utf-8": [("X-Note", "café".encode()), ("Accept", b"*/*")],
    "latin-1": [("X-Note", "café".encode("latin-1")), ("Accept", b"*/*")],
    "none": [],
}


@pytest.mark.parametrize("headers", GIVEN.values(), ids=GIVEN.keys())
def test_the_headers_read_once_are_httpx_s_own(headers: list[tuple[str, object]]) -> None:
    request = httpx.Request("POST", "https://psp.test/v1/payments", headers=headers)  # type: ignore[arg-type]
    assert read_headers(request.headers) == request.headers.multi_items()


def test_every_value_of_a_header_in_order() -> None:
    request = httpx.Request("POST", "https://psp.test/", headers=GIVEN["repeated"])
    pairs = read_headers(request.headers)
    assert values_of(pairs, "content-type") == request.headers.get_list("Content-Type")
    assert values_of(pairs, "idempotency-key") == []
