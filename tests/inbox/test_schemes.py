"""The schemes' parsers: strict about what they need, tolerant only of other versions.

Interoperability with the libraries senders use is in test_interop.py; what a
receiver answers for each refusal, in test_receiver.py.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient.inbox import SignatureInvalid, StandardWebhooks, StripeSignature

from .conftest import OTHER_SECRET, SECRET

NOW = 1_700_000_000
BODY = b'{"id":"evt_1","type":"payment.succeeded"}'
STANDARD = StandardWebhooks([SECRET])
STRIPE_SECRET = "whsec_stripe_0123456789abcdef"
STRIPE = StripeSignature(STRIPE_SECRET)


def standard(**changes: str) -> dict[str, str]:
    headers = STANDARD.headers(message_id="evt_1", timestamp=NOW, body=BODY)
    headers.update(changes)
    return headers


def refused(scheme: object, headers: dict[str, str], body: bytes = BODY) -> str:
    with pytest.raises(SignatureInvalid) as raised:
        scheme.verify(headers, body, now=NOW, tolerance=300)  # type: ignore[attr-defined]
    return raised.value.reason


GOOD_V1 = standard()["webhook-signature"]
ZERO_V1 = "v1," + base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    "signature",
    [
        GOOD_V1,
        f"{ZERO_V1} {GOOD_V1}",  # any v1 of several
        f"  {GOOD_V1}  ",  # spaces around entries
        f"v1a,{'A' * 88} {GOOD_V1}",  # another version is skipped
        f"v2,whatever {GOOD_V1}",
    ],
)
def test_standard_webhooks_entries_that_verify(signature: str) -> None:
    signed = STANDARD.verify(
        standard(**{"webhook-signature": signature}), BODY, now=NOW, tolerance=300
    )
    assert (signed.message_id, signed.timestamp) == ("evt_1", NOW)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"webhook-signature": ""}, "missing"),
        ({"webhook-signature": "v1a,abc"}, "malformed"),  # no v1 at all
        ({"webhook-signature": "v1"}, "malformed"),  # no comma
        ({"webhook-signature": ",abc"}, "malformed"),
        ({"webhook-signature": "v1,not base64!"}, "malformed"),
        ({"webhook-signature": "v1," + base64.b64encode(bytes(31)).decode()}, "malformed"),
        ({"webhook-signature": " ".join([ZERO_V1] * 17)}, "malformed"),
        ({"webhook-signature": "v2," + "A" * 5000}, "malformed"),
        ({"webhook-signature": ZERO_V1}, "mismatch"),
        ({"webhook-timestamp": ""}, "missing"),
        ({"webhook-timestamp": "17e8"}, "malformed"),
        ({"webhook-timestamp": "-1"}, "malformed"),
        ({"webhook-timestamp": "\u0661\u0667" + "\u0660" * 8}, "malformed"),  # not ASCII digits
        ({"webhook-timestamp": "1" * 13}, "malformed"),
        ({"webhook-timestamp": str(NOW + 1)}, "mismatch"),  # the timestamp is signed
        ({"webhook-id": "evt_2"}, "mismatch"),  # so is the id
    ],
)
def test_standard_webhooks_headers_that_are_refused(changes: dict[str, str], reason: str) -> None:
    assert refused(STANDARD, standard(**changes)) == reason


def test_a_standard_webhooks_header_sent_twice_is_refused() -> None:
    pairs = [*standard().items(), ("Webhook-Signature", GOOD_V1)]
    with pytest.raises(SignatureInvalid, match="sent 2 times"):
        STANDARD.verify(pairs, BODY, now=NOW, tolerance=300)


def test_a_rotation_signs_one_entry_per_secret_and_either_verifies() -> None:
    both = StandardWebhooks([SECRET, OTHER_SECRET])
    header = both.signature(message_id="evt_1", timestamp=NOW, body=BODY)
    assert len(header.split(" ")) == 2
    for secret in (SECRET, OTHER_SECRET):
        StandardWebhooks(secret).verify(
            standard(**{"webhook-signature": header}), BODY, now=NOW, tolerance=300
        )


def test_a_generated_secret_is_usable_and_fresh() -> None:
    first, second = StandardWebhooks.generate_secret(), StandardWebhooks.generate_secret()
    assert first != second
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"))) == 24
    StandardWebhooks(first)  # accepted as it is


def test_a_secret_without_its_padding_is_the_same_key() -> None:
    unpadded = "whsec_" + base64.b64encode(b"k" * 20).decode().rstrip("=")
    padded = "whsec_" + base64.b64encode(b"k" * 20).decode()
    assert StandardWebhooks(unpadded).signature(
        message_id="m", timestamp=NOW, body=BODY
    ) == StandardWebhooks(padded).signature(message_id="m", timestamp=NOW, body=BODY)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("  ", "missing"),
        ("v1=" + "0" * 64, "malformed"),  # no t
        (f"t={NOW},t={NOW},v1={'0' * 64}", "malformed"),
        (f"t={NOW}", "malformed"),  # no v1
        (f"t={NOW},v1=xyz", "malformed"),
        (f"t={NOW},v1={'g' * 64}", "malformed"),
        (f"t=soon,v1={'0' * 64}", "malformed"),
        (f"t={NOW},,v1={'0' * 64}", "malformed"),
        (f"t={NOW},v1={'0' * 64}", "mismatch"),
        (f"t={NOW}," + ",".join([f"v1={'0' * 64}"] * 17), "malformed"),
    ],
)
def test_stripe_headers_that_are_refused(header: str | None, reason: str) -> None:
    headers = {} if header is None else {"Stripe-Signature": header}
    assert refused(STRIPE, headers) == reason


def test_stripe_upper_case_hex_is_the_same_signature() -> None:
    header = STRIPE.signature(timestamp=NOW, body=BODY)
    t, v1 = header.split(",")
    upper = f"{t},v1={v1.removeprefix('v1=').upper()}"
    assert STRIPE.verify({"Stripe-Signature": upper}, BODY, now=NOW, tolerance=300).timestamp == NOW


@pytest.mark.parametrize("tolerance", [0, -1, float("nan"), float("inf")])
def test_a_bad_tolerance_is_a_bug_not_a_refusal(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        STANDARD.verify(standard(), BODY, now=NOW, tolerance=tolerance)


@given(
    message_id=st.from_regex(r"[A-Za-z0-9_:~-]{1,40}", fullmatch=True),
    timestamp=st.integers(min_value=0, max_value=10**11),
    body=st.binary(max_size=300),
    keys=st.lists(st.binary(min_size=16, max_size=40), min_size=1, max_size=4),
)
def test_what_a_scheme_signs_it_verifies_and_a_changed_body_it_refuses(
    message_id: str, timestamp: int, body: bytes, keys: list[bytes]
) -> None:
    scheme = StandardWebhooks(keys)
    headers = scheme.headers(message_id=message_id, timestamp=timestamp, body=body)
    signed = StandardWebhooks(keys[-1:]).verify(headers, body, now=timestamp, tolerance=1)
    assert (signed.message_id, signed.timestamp) == (message_id, timestamp)
    with pytest.raises(SignatureInvalid):
        scheme.verify(headers, body + b"x", now=timestamp, tolerance=1)
