"""The one rule of what is never written to a store: names that look secret, the request
headers persisted by an allow list, and secret query parameters taken out of URLs."""

from __future__ import annotations

import httpx
import pytest

from idemclient._redaction import HeaderRule, looks_secret, origin_of, redact_url


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("Proxy-Authorization", True),
        ("X-Auth-Token", True),  # stored in clear before: only a fixed list was redacted
        ("Api-Key", True),  # likewise
        ("X-API-KEY", True),  # case does not matter
        ("X_Api_Key", True),  # nor separators
        ("X-Client-Secret", True),
        ("X-Password", True),
        ("X-Passphrase", True),
        ("Stripe-Signature", True),
        ("Signature-Input", True),  # RFC 9421 message signatures
        ("Cookie", True),
        ("Set-Cookie", True),
        ("X-Session-Id", True),
        ("X-Amz-Security-Token", True),
        ("X-Amz-Credential", True),
        ("X-CSRF-Token", True),
        ("access_token", True),  # query parameters follow the same rule
        ("api_key", True),
        ("apikey", True),
        ("token", True),
        ("signature", True),
        ("sig", True),  # a whole name too short to be a mark (Azure SAS)
        ("pwd", True),
        ("Idempotency-Key", False),  # holds "key", but it is no credential
        ("X-Idempotency-Key", False),
        ("Content-Type", False),
        ("Content-Encoding", False),
        ("Accept", False),
        ("User-Agent", False),
        ("X-Request-Id", False),
        ("Stripe-Account", False),
        ("Idempotent-Replayed", False),
        ("Location", False),
        ("design", False),  # "sig" is a whole name, not a mark
        ("signup_source", False),
        ("amount", False),
    ],
)
def test_which_names_look_secret(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


REQUEST = (
    ("Host", "psp.test"),
    ("Content-Type", "application/json"),
    ("Accept", "*/*"),
    ("User-Agent", "python-httpx/0.28"),
    ("Authorization", "Bearer sk_live_x"),
    ("X-Auth-Token", "tok"),
    ("Stripe-Account", "acct_1"),
    ("Content-Length", "12"),
    ("Idempotency-Key", "k-1"),
    ("cookie", "a=1"),
    ("Cookie", "b=2"),
)


@pytest.mark.parametrize(
    ("rule", "kept", "withheld"),
    [
        # The allow list: only what describes the body or the answer wanted.
        (
            HeaderRule(),
            (("Content-Type", "application/json"), ("Accept", "*/*")),
            ("User-Agent", "Authorization", "X-Auth-Token", "Stripe-Account", "cookie"),
        ),
        # A name the user adds is persisted with its value.
        (
            HeaderRule.of(persist=["stripe-account"]),
            (("Content-Type", "application/json"), ("Accept", "*/*"), ("Stripe-Account", "acct_1")),
            ("User-Agent", "Authorization", "X-Auth-Token", "cookie"),
        ),
        # A name the user calls secret is never persisted, even if allowed by default.
        (
            HeaderRule.of(secret=["Accept"]),
            (("Content-Type", "application/json"),),
            ("Accept", "User-Agent", "Authorization", "X-Auth-Token", "Stripe-Account", "cookie"),
        ),
    ],
)
def test_request_headers_are_persisted_by_an_allow_list(
    rule: HeaderRule, kept: tuple[tuple[str, str], ...], withheld: tuple[str, ...]
) -> None:
    assert rule.split_request(REQUEST) == (kept, withheld)


def test_a_secret_looking_name_cannot_be_persisted() -> None:
    with pytest.raises(ValueError, match="X-Session-Id"):
        HeaderRule.of(persist=["Content-Type", "X-Session-Id"])
    with pytest.raises(ValueError, match="X-Partner"):
        HeaderRule.of(secret=["X-Partner"], persist=["X-Partner"])
    with pytest.raises(TypeError, match="collection"):
        HeaderRule.of(secret="Authorization")


def test_response_headers_keep_all_but_secret_and_transient_ones() -> None:
    rule = HeaderRule.of(secret=["X-Partner-Sig"])
    answer = (
        ("Content-Type", "application/json"),
        ("Location", "/v1/payments/pay_1"),
        ("Set-Cookie", "sid=1"),
        ("X-Partner-Sig", "abc"),
        ("WWW-Authenticate", "Bearer"),
        ("Content-Length", "2"),
        ("Idempotent-Replayed", "true"),
    )
    assert rule.response(answer) == (
        ("Content-Type", "application/json"),
        ("Location", "/v1/payments/pay_1"),
        ("Idempotent-Replayed", "true"),
    )


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        # No secret: the URL as it was, so fingerprints of earlier versions still agree.
        ("https://psp.test/v1/payments?a=b+c&d=%20", "https://psp.test/v1/payments?a=b+c&d=%20"),
        ("https://u:pw@psp.test/v1/payments", "https://psp.test/v1/payments"),
        # A secret parameter keeps its name, never its value, in its place.
        ("https://psp.test/v1/p?access_token=abc&x=1", "https://psp.test/v1/p?access_token=&x=1"),
        ("https://psp.test/v1/p?x=1&API_KEY=abc", "https://psp.test/v1/p?x=1&API_KEY="),
        ("https://psp.test/v1/p?sig=abc&se=2030", "https://psp.test/v1/p?sig=&se=2030"),
        # An empty secret parameter carries nothing: it counts as absent.
        ("https://psp.test/v1/p?x=1&token=", "https://psp.test/v1/p?x=1"),
        ("https://psp.test/v1/p?token=", "https://psp.test/v1/p"),
    ],
)
def test_secret_query_values_are_taken_out_of_urls(url: str, stored: str) -> None:
    assert str(redact_url(httpx.URL(url))) == stored


def test_a_rotating_query_token_redacts_to_one_url() -> None:
    first = redact_url(httpx.URL("https://psp.test/v1/p?access_token=old&x=1"))
    rotated = redact_url(httpx.URL("https://psp.test/v1/p?access_token=new&x=1"))
    assert first.raw_path == rotated.raw_path


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://api.psp.test/v1/payments", "https://api.psp.test"),
        ("HTTPS://API.psp.test:443/v1", "https://api.psp.test"),  # the default port
        ("http://psp.test:80/", "http://psp.test"),
        ("http://psp.test:8080/", "http://psp.test:8080"),
        ("https://psp.test:80/", "https://psp.test:80"),  # not https' default
        ("http://[::1]:9000/x", "http://[::1]:9000"),
    ],
)
def test_the_origin_of_a_url(url: str, origin: str) -> None:
    assert origin_of(url) == origin
