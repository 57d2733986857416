"""The signature header: its format, signing, parsing and verifying, failing closed."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient import IdemError
from idemclient.inbox import (
    ParsedSignature,
    SignatureInvalid,
    _signature,
    parse_signature,
    sign,
    verify_signature,
)

from .conftest import OTHER_SECRET, SECRET

NOW = 1_800_000_000
BODY = b'{"id":"evt_1","type":"payment.succeeded"}'


def _hex(secret: str, text: bytes) -> str:
    # Written out independently of the library: the format as documented.
    return hmac.new(secret.encode(), text, hashlib.sha256).hexdigest()


def test_the_signature_is_hmac_sha256_of_timestamp_message_id_and_body() -> None:
    header = sign([SECRET], timestamp=NOW, message_id="evt_1", body=BODY)
    assert header == f"t={NOW},v1={_hex(SECRET, b'1800000000.evt_1.' + BODY)}"


def test_a_rotation_signs_with_every_secret_in_order() -> None:
    header = sign([SECRET, OTHER_SECRET], timestamp=NOW, message_id="evt_1", body=BODY)
    text = b"1800000000.evt_1." + BODY
    assert header == f"t={NOW},v1={_hex(SECRET, text)},v1={_hex(OTHER_SECRET, text)}"


def verify(header: str | None, **overrides: object) -> int:
    arguments: dict[str, object] = {
        "secrets": [SECRET],
        "message_id": "evt_1",
        "body": BODY,
        "now": NOW,
        "tolerance": 300,
    }
    arguments.update(overrides)
    return verify_signature(header, **arguments)  # type: ignore[arg-type]


GOOD = sign([SECRET], timestamp=NOW, message_id="evt_1", body=BODY)


def test_a_good_signature_returns_its_timestamp() -> None:
    assert verify(GOOD) == NOW


@pytest.mark.parametrize(
    ("secrets", "accepted"),
    [
        ([SECRET], True),
        ([OTHER_SECRET, SECRET], True),  # mid-rotation: the receiver holds both
        ([OTHER_SECRET], False),  # a secret the sender never used
    ],
)
def test_any_secret_held_by_the_receiver_may_match(secrets: list[str], accepted: bool) -> None:
    if accepted:
        assert verify(GOOD, secrets=secrets) == NOW
    else:
        with pytest.raises(SignatureInvalid) as caught:
            verify(GOOD, secrets=secrets)
        assert caught.value.reason == "mismatch"


def test_a_sender_mid_rotation_is_accepted_by_a_receiver_holding_only_the_new_secret() -> None:
    header = sign([OTHER_SECRET, SECRET], timestamp=NOW, message_id="evt_1", body=BODY)
    assert verify(header, secrets=[SECRET]) == NOW


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"body": BODY + b" "}, "mismatch"),  # body tampered
        ({"body": BODY.replace(b"succeeded", b"declined!")}, "mismatch"),
        ({"message_id": "evt_2"}, "mismatch"),  # the body replayed under a new id
        ({"now": NOW + 301}, "stale"),  # older than the tolerance
        ({"now": NOW + 300}, None),  # exactly at the tolerance: still fine
        ({"now": NOW - 301}, "future"),  # the sender's clock is far ahead
        ({"now": NOW + 1000, "tolerance": 2000}, None),
        ({"secrets": []}, "mismatch"),  # no secret configured never means "accept"
    ],
)
def test_what_is_refused_and_why(change: dict[str, object], reason: str | None) -> None:
    if reason is None:
        assert verify(GOOD, **change) == NOW
        return
    with pytest.raises(SignatureInvalid) as caught:
        verify(GOOD, **change)
    assert caught.value.reason == reason
    assert caught.value.message_id == change.get("message_id", "evt_1")


def test_a_forged_signature_is_refused_even_when_it_is_also_stale() -> None:
    # Authenticity first: "stale" is only said of what the sender really signed.
    forged = f"t={NOW - 10_000},v1={'0' * 64}"
    with pytest.raises(SignatureInvalid) as caught:
        verify(forged)
    assert caught.value.reason == "mismatch"


def test_a_changed_timestamp_breaks_the_signature() -> None:
    tampered = GOOD.replace(f"t={NOW}", f"t={NOW + 1}")
    with pytest.raises(SignatureInvalid) as caught:
        verify(tampered)
    assert caught.value.reason == "mismatch"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("   ", "missing"),
        ("v1=" + "a" * 64, "malformed"),  # no timestamp
        (f"t={NOW}", "malformed"),  # no signature
        (f"t={NOW},v0={'a' * 64}", "malformed"),  # only an unknown scheme
        (f"t={NOW},t={NOW},v1={'a' * 64}", "malformed"),  # two timestamps
        (f"t=-5,v1={'a' * 64}", "malformed"),
        (f"t=12.5,v1={'a' * 64}", "malformed"),
        (f"t=١٢٣,v1={'a' * 64}", "malformed"),  # Arabic-Indic digits are not ASCII digits
        (f"t={'9' * 13},v1={'a' * 64}", "malformed"),  # absurdly far in the future
        (f"t={NOW},v1={'a' * 63}", "malformed"),  # short
        (f"t={NOW},v1={'g' * 64}", "malformed"),  # not hex
        (f"t={NOW},v1", "malformed"),  # no "="
        (f"t={NOW},,v1={'a' * 64}", "malformed"),  # empty item
        (f"t={NOW},=x,v1={'a' * 64}", "malformed"),  # empty name
        (f"t={NOW}," + ",".join([f"v1={'a' * 64}"] * 17), "malformed"),  # too many
        ("x" * 5000, "malformed"),  # too long to look at
    ],
)
def test_malformed_headers_are_refused(header: str | None, reason: str) -> None:
    with pytest.raises(SignatureInvalid) as caught:
        parse_signature(header)
    assert caught.value.reason == reason
    with pytest.raises(SignatureInvalid):
        verify(header)


def test_spaces_other_schemes_and_upper_case_hex_are_understood() -> None:
    digest = GOOD.split("v1=")[1]
    header = f" t={NOW} , v2=whatever , v1={digest.upper()} "
    assert parse_signature(header) == ParsedSignature(NOW, (digest,))
    assert verify(header) == NOW


def test_every_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(_signature.hmac, "compare_digest", spy)
    header = f"{GOOD},v1={'0' * 64}"
    assert verify(header, secrets=[SECRET, OTHER_SECRET]) == NOW
    # Both secrets against both candidates, even though the first pair matched.
    assert len(compared) == 4


@pytest.mark.parametrize("secret", ["", "short", b"0123456789abcde"])
def test_short_secrets_are_refused(secret: str | bytes) -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        sign([secret], timestamp=NOW, message_id="evt_1", body=BODY)


def test_signing_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        sign([], timestamp=NOW, message_id="evt_1", body=BODY)


def test_the_error_is_an_idemerror_naming_its_reason() -> None:
    with pytest.raises(IdemError, match=r"webhook signature refused \(stale\)"):
        verify(GOOD, now=NOW + 3600)


# -- property tests -------------------------------------------------------------------


@given(st.text(max_size=300))
def test_the_parser_refuses_garbage_with_its_own_error_only(header: str) -> None:
    try:
        parsed = parse_signature(header)
    except SignatureInvalid as exc:
        reason = exc.reason
    else:
        reason = None
        assert parsed.v1
        assert all(len(v) == 64 for v in parsed.v1)
    assert reason in {None, "missing", "malformed"}


@given(
    timestamp=st.integers(min_value=0, max_value=10**12 - 1),
    # every id a sender may sign: the key rules without '.', the signed text's
    # separator (test_replay_holes.py pins that a dotted id is refused)
    message_id=st.from_regex(r"[A-Za-z0-9\-_:~]{1,255}", fullmatch=True),
    body=st.binary(max_size=200),
    secrets=st.lists(st.binary(min_size=16, max_size=40), min_size=1, max_size=4),
)
def test_what_is_signed_parses_back_and_verifies(
    timestamp: int, message_id: str, body: bytes, secrets: list[bytes]
) -> None:
    header = sign(secrets, timestamp=timestamp, message_id=message_id, body=body)
    parsed = parse_signature(header)
    assert parsed.timestamp == timestamp
    assert len(parsed.v1) == len(secrets)
    assert (
        verify_signature(
            header, secrets=secrets[-1:], message_id=message_id, body=body, now=timestamp
        )
        == timestamp
    )


@given(body=st.binary(min_size=1, max_size=100), data=st.data())
def test_any_single_byte_change_to_the_body_is_refused(body: bytes, data: st.DataObject) -> None:
    header = sign([SECRET], timestamp=NOW, message_id="evt_1", body=body)
    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    tampered = body[:index] + bytes([body[index] ^ flip]) + body[index + 1 :]
    with pytest.raises(SignatureInvalid):
        verify(header, body=tampered)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["t", "v1", "v0", "v2", "", "T", "v1 "]),
            st.text(alphabet="0123456789abcdefABCDEF=,- ", max_size=70),
        ),
        max_size=6,
    )
)
def test_near_miss_headers_are_refused_with_the_one_error(items: list[tuple[str, str]]) -> None:
    header = ",".join(f"{name}={value}" for name, value in items)
    with pytest.raises(SignatureInvalid):  # and never another exception, nor a pass
        verify(header)
