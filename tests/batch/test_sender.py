"""As whom a row was sent: the credentials read from a request, and their salted one-way
digest in the fragment of a stored URL, which is never sent and never fingerprinted."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from idemclient._fingerprint import fingerprint
from idemclient._redaction import origin_of
from idemclient.batch._sender import Sender, credentials_of, target_of

URL = "https://psp.test/v1/payouts"


def request(**options: Any) -> httpx.Request:
    client = httpx.Client(base_url="https://psp.test", **options)
    return client.build_request("POST", "/v1/payouts")


@pytest.mark.parametrize(
    ("options", "carries"),
    [
        ({}, None),
        ({"cookies": {"sid": "s1"}}, None),  # a session, not an account
        ({"headers": {"X-Session-Id": "s"}}, None),
        ({"headers": {"Idempotency-Key": "k"}}, None),
        ({"headers": {"Authorization": "Bearer sk_1"}}, "sk_1"),
        ({"headers": {"X-Api-Key": "key_1"}}, "key_1"),
        ({"params": {"access_token": "tok_1"}}, "tok_1"),
        ({"params": {"page": "2"}}, None),
    ],
)
def test_the_credentials_a_request_carries(options: dict[str, object], carries: str | None) -> None:
    found = credentials_of(request(**options))
    if carries is None:
        assert found is None
    else:
        assert found is not None
        assert carries.encode() in found


def test_basic_auth_and_a_password_in_the_url_are_credentials() -> None:
    basic = credentials_of(request(), httpx.BasicAuth("sk_live_1", ""))
    assert basic is not None
    assert b"Basic " in basic
    assert basic != credentials_of(request(), httpx.BasicAuth("sk_live_2", ""))
    in_url = httpx.Request("POST", "https://user:pw@psp.test/v1/payouts")
    found = credentials_of(in_url)
    assert found is not None
    assert b"user:pw" in found


def test_a_url_is_marked_with_a_digest_never_the_credentials() -> None:
    sender = Sender(b"Bearer sk_live_SECRET")
    marked = sender.mark(URL)
    target, _, fragment = marked.partition("#")
    assert target == URL
    assert fragment.startswith("sent-as=v1.")
    assert "SECRET" not in marked
    assert "SECRET" not in repr(sender)
    # Never sent, and neither fingerprinted nor part of the origin: every version reads it.
    parsed = httpx.URL(marked)
    assert parsed.raw_path == b"/v1/payouts"
    assert fingerprint("POST", parsed, b"{}") == fingerprint("POST", httpx.URL(URL), b"{}")
    assert origin_of(marked) == origin_of(URL)
    assert target_of(marked) == URL
    assert sender.mark(marked) == marked  # marked again: the same mark, not two
    assert Sender(None).mark(marked) == URL  # no credentials now: nothing to say


def test_a_marked_url_tells_whether_it_was_sent_with_other_credentials() -> None:
    earlier = Sender(b"Bearer sk_test_1").mark(URL)
    assert not Sender(b"Bearer sk_test_1").other(earlier)  # the same, under another salt
    assert Sender(b"Bearer sk_live_1").other(earlier)
    # Unknown either way: never "other".
    assert not Sender(b"Bearer sk_live_1").other(URL)  # recorded by an earlier version
    assert not Sender(None).other(earlier)  # credentials this run cannot see
    for damaged in (f"{URL}#sent-as=v2.00.00", f"{URL}#sent-as=v1.zz.zz", f"{URL}#sent-as=v1.00"):
        assert not Sender(b"Bearer sk_live_1").other(damaged)
