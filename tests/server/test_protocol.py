"""The protocol's pure decisions, one table row at a time, plus fuzzing of the parsers."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient.testing._protocol.rules import (
    MAX_BODY_BYTES,
    Phase,
    Problem,
    Step,
    Verdict,
    downstream_key,
    judge_existing,
    next_step,
    parse_bearer,
    parse_idempotency_key,
    parse_payment,
    render_retry_after,
    request_hash,
)

KEY_ORACLE = re.compile(r"[A-Za-z0-9\-_.:~]{1,255}")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("abc", "abc"),  # bare token
        ('"abc"', "abc"),  # RFC 8941 sf-string form
        ("  abc\t", "abc"),  # optional whitespace around a field value
        ("0190c6f1-7b2e-7c3a-9d4e-2f1a3b4c5d6e", "0190c6f1-7b2e-7c3a-9d4e-2f1a3b4c5d6e"),  # UUIDv7
        ("A-Z_a.z:0~9", "A-Z_a.z:0~9"),  # every punctuation mark allowed
        ("k" * 255, "k" * 255),  # the longest key
        ('"' + "k" * 255 + '"', "k" * 255),  # the longest key, quoted
    ],
)
def test_valid_keys_are_accepted(raw: str, key: str) -> None:
    assert parse_idempotency_key([raw]) == key


@pytest.mark.parametrize(
    "values",
    [
        [],  # missing
        [""],  # empty
        ['""'],  # empty sf-string
        ["k" * 256],  # one character too long
        ["has space"],
        ["a,b"],  # two keys folded into one header
        ["caf\u00e9"],  # non-ASCII
        ['"ab\\"c"'],  # an sf-string escape: the quote is not a key character
        ['"abc'],  # unbalanced quote
        ["abc", "abc"],  # two headers: ambiguous even when equal
        ["a/b"],
        ["a\x00b"],
    ],
)
def test_invalid_keys_are_400(values: list[str]) -> None:
    with pytest.raises(Problem) as caught:
        parse_idempotency_key(values)
    assert caught.value.status == 400
    assert caught.value.slug == "invalid-idempotency-key"


@given(st.text(max_size=300))
def test_key_parsing_agrees_with_the_charset_rule(raw: str) -> None:
    stripped = raw.strip(" \t")
    quoted = len(stripped) >= 2 and stripped[0] == stripped[-1] == '"'
    inner = stripped[1:-1] if quoted else stripped
    if KEY_ORACLE.fullmatch(inner):
        assert parse_idempotency_key([raw]) == inner
    else:
        with pytest.raises(Problem, match=r"^400 "):
            parse_idempotency_key([raw])


@given(st.from_regex(KEY_ORACLE, fullmatch=True))
def test_every_key_of_the_charset_round_trips_bare_and_quoted(key: str) -> None:
    assert parse_idempotency_key([key]) == key
    assert parse_idempotency_key([f'"{key}"']) == key


@pytest.mark.parametrize(
    ("header", "client"),
    [
        ("Bearer alice", "alice"),
        ("bearer alice", "alice"),  # the scheme is case-insensitive
        ("Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
        ("Bearer abc+/==", "abc+/=="),  # token68 padding
    ],
)
def test_bearer_tokens_name_the_client(header: str, client: str) -> None:
    assert parse_bearer([header]) == client


@pytest.mark.parametrize(
    "values",
    [
        [],  # missing
        ["Bearer"],  # no token
        ["Bearer "],
        ["Basic YWxpY2U6c2VjcmV0"],  # another scheme
        ["Bearer a b"],  # a space inside the token
        ["Bearer alice", "Bearer bob"],  # two identities
    ],
)
def test_missing_or_malformed_authorization_is_401(values: list[str]) -> None:
    with pytest.raises(Problem) as caught:
        parse_bearer(values)
    assert caught.value.status == 401
    assert ("www-authenticate", 'Bearer realm="idemclient-reference"') in caught.value.headers


def test_a_valid_body_keeps_every_other_field_and_canonicalises() -> None:
    body = b'{"reference": "inv-1", "currency": "EUR", "amount": 5, "memo": {"b": 1, "a": [2]}}'
    payment, canonical = parse_payment(body)
    assert (payment.amount, payment.currency, payment.reference) == (5, "EUR", "inv-1")
    assert payment.extra == {"memo": {"b": 1, "a": [2]}}
    assert canonical == b'{"amount":5,"currency":"EUR","memo":{"a":[2],"b":1},"reference":"inv-1"}'


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),  # no body
        (b"not json", 400),
        (b"\xff\xfe", 400),  # not UTF-8
        (b"[1, 2]", 400),  # not an object
        (b'{"currency": "EUR", "reference": "r"}', 400),  # amount missing
        (b'{"amount": 0, "currency": "EUR", "reference": "r"}', 400),  # amount not positive
        (b'{"amount": -5, "currency": "EUR", "reference": "r"}', 400),
        (b'{"amount": 1.5, "currency": "EUR", "reference": "r"}', 400),  # not minor units
        (b'{"amount": true, "currency": "EUR", "reference": "r"}', 400),  # a bool is no amount
        (b'{"amount": "5", "currency": "EUR", "reference": "r"}', 400),
        (b'{"amount": 9007199254740992, "currency": "EUR", "reference": "r"}', 400),  # > 2**53-1
        (b'{"amount": NaN, "currency": "EUR", "reference": "r"}', 400),  # not JSON at all
        (b'{"amount": 5, "currency": "EURO", "reference": "r"}', 400),
        (b'{"amount": 5, "currency": 978, "reference": "r"}', 400),
        (b'{"amount": 5, "currency": "EUR"}', 400),  # reference missing
        (b'{"amount": 5, "currency": "EUR", "reference": ""}', 400),
        (b'{"amount": 5, "currency": "EUR", "reference": "r", "id": "x"}', 400),  # reserved
        (b'{"amount": 5, "currency": "EUR", "reference": "r", "status": "ok"}', 400),
        (b"[" * 100_000 + b"]" * 100_000, 413),  # too big before it is too deep
        # what one storage backend keeps and another refuses (PostgreSQL: NUL)
        (b'{"amount": 5, "currency": "EUR", "reference": "r\\u0000"}', 400),
        (b'{"amount": 5, "currency": "EUR", "reference": "r", "m": {"\\u0000": 1}}', 400),
        (b'{"amount": 5, "currency": "EUR", "reference": "\\ud800"}', 400),  # lone surrogate
        # 33 containers deep, the body included: one past the bound
        (
            b'{"amount": 5, "currency": "EUR", "reference": "r", "t": '
            + b"[" * 32
            + b"]" * 32
            + b"}",
            400,
        ),
    ],
)
def test_invalid_bodies_are_rejected(body: bytes, status: int) -> None:
    with pytest.raises(Problem) as caught:
        parse_payment(body)
    assert caught.value.status == status


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (b'"memo": "\\u0000"', "memo"),
        (b'"m": {"a": [1, {"b": "\\udbff"}]}', "m.a[1].b"),
        (b'"m": {"x y": "\\u0000"}', 'm["x y"]'),
        (b'"m": {"\\ud800": 1}', 'm["\\ud800"]'),
        (b'"d": ' + b"[" * 32 + b"]" * 32, "d" + "[0]" * 31),  # 33 deep with the body
    ],
)
def test_what_no_backend_stores_alike_is_refused_naming_the_field(extra: bytes, field: str) -> None:
    with pytest.raises(Problem) as caught:
        parse_payment(b'{"amount": 5, "currency": "EUR", "reference": "r", ' + extra + b"}")
    problem = caught.value
    assert (problem.status, problem.extra["field"]) == (400, field)
    assert problem.detail.startswith(field + " ")
    problem.response()  # the answer itself can be sent: no raw NUL or surrogate in it


def test_a_body_at_the_nesting_bound_and_with_escapes_elsewhere_is_valid() -> None:
    body = b'{"amount": 5, "currency": "EUR", "reference": "caf\\u00e9 \\ud83d\\ude00", "d": '
    body += b"[" * 31 + b"]" * 31 + b"}"
    payment, _ = parse_payment(body)
    assert payment.reference == "caf\u00e9 \U0001f600"


def test_deeply_nested_json_is_a_400_not_a_crash() -> None:
    body = b"[" * 30_000 + b"]" * 30_000
    assert len(body) <= MAX_BODY_BYTES
    with pytest.raises(Problem) as caught:
        parse_payment(body)
    assert caught.value.status == 400


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_escape_as_anything_but_a_problem(body: bytes) -> None:
    outcome: Problem | tuple[object, bytes]
    try:
        outcome = parse_payment(body)
    except Problem as problem:
        outcome = problem
    if isinstance(outcome, Problem):
        assert outcome.status in (400, 413)
    else:
        assert json.loads(outcome[1])["amount"] == outcome[0].amount  # type: ignore[attr-defined]


# Text every backend stores (a NUL is refused: see test_nul_and_surrogates_...).
_stored_char = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(_stored_char, max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(_stored_char, max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    amount=st.integers(min_value=1, max_value=2**53 - 1),
    currency=st.from_regex(r"[A-Za-z]{3}", fullmatch=True),
    reference=st.text(_stored_char, min_size=1, max_size=255),
    extra=st.dictionaries(
        st.text(_stored_char, max_size=8).filter(
            lambda k: (
                k
                not in {"amount", "currency", "reference", "id", "object", "status", "created"}
                | {"idempotency_key", "external"}
            )
        ),
        _json_values,
        max_size=4,
    ),
)
def test_every_valid_body_parses_and_its_canonical_form_is_stable(
    amount: int, currency: str, reference: str, extra: dict[str, object]
) -> None:
    value = {**extra, "amount": amount, "currency": currency, "reference": reference}
    payment, canonical = parse_payment(json.dumps(value, indent=2).encode())
    assert (payment.amount, payment.currency, payment.reference) == (amount, currency, reference)
    assert dict(payment.extra) == extra
    # Re-serialised differently, it is still the same request.
    assert parse_payment(json.dumps(value, sort_keys=True).encode())[1] == canonical


def test_the_request_hash_covers_method_path_and_body() -> None:
    base = request_hash("POST", "/v1/payments", b"{}")
    assert request_hash("post", "/v1/payments", b"{}") == base
    assert request_hash("PUT", "/v1/payments", b"{}") != base
    assert request_hash("POST", "/v1/payouts", b"{}") != base
    assert request_hash("POST", "/v1/payments", b'{"a":1}') != base
    # Length prefixes: moving bytes between path and body changes the hash.
    assert request_hash("POST", "/v1/p", b"ayments{}") != base


def test_derived_keys_are_deterministic_per_client_key_and_step() -> None:
    k1 = downstream_key("alice", "req-001", "ext1")
    assert downstream_key("alice", "req-001", "ext1") == k1
    assert downstream_key("alice", "req-001", "ext2") != k1
    # Two tenants with the same key must not collide at a shared external system.
    assert downstream_key("bob", "req-001", "ext1") != k1
    assert downstream_key("alice", "req-0011", "ext1") != downstream_key(
        "alice", "req-001", "1ext1"
    )


NOW = 1_000.0
LEASE = 30.0
H = b"hash"


@pytest.mark.parametrize(
    ("stored_hash", "state", "locked_at", "verdict"),
    [
        (H, "finished", None, Verdict.REPLAY),  # done: stored answer, verbatim
        (b"other", "finished", None, Verdict.MISMATCH),  # other request under a used key
        (b"other", "started", NOW, Verdict.MISMATCH),  # the hash is checked before the lease
        (H, "started", NOW, Verdict.IN_FLIGHT),  # fresh lease
        (H, "started", NOW - LEASE, Verdict.IN_FLIGHT),  # exactly at the edge: still fresh
        (H, "started", NOW - LEASE - 0.001, Verdict.TAKE_OVER),  # just expired
        (H, "started", None, Verdict.TAKE_OVER),  # released after a 202: take it now
    ],
)
def test_judging_an_existing_key(
    stored_hash: bytes, state: str, locked_at: float | None, verdict: Verdict
) -> None:
    assert (
        judge_existing(
            stored_hash=stored_hash,
            state=state,
            locked_at=locked_at,
            request_hash=H,
            now=NOW,
            lease=LEASE,
        )
        is verdict
    )


@pytest.mark.parametrize(
    ("point", "declined", "step"),
    [
        (None, False, Step.HANDLER1),
        ("H1_DONE", False, Step.SEND_EXT1),
        ("EXT1_SENT", False, Step.CALL_EXT1),  # resume here: probe, then maybe call again
        ("EXT1_DONE", False, Step.HANDLER2),
        ("H2_DONE", False, Step.SEND_EXT2),
        ("H2_DONE", True, Step.HANDLER3),  # declined by E1: nothing to settle at E2
        ("EXT2_SENT", False, Step.CALL_EXT2),
        ("EXT2_DONE", False, Step.HANDLER3),
    ],
)
def test_the_phase_machine_never_goes_back(point: str | None, declined: bool, step: Step) -> None:
    assert next_step(point, declined=declined) is step


@pytest.mark.parametrize("point", ["ADMITTED", "EXT1_CALLED", "FINISHED", "nonsense"])
def test_only_recovery_points_have_a_next_step(point: str) -> None:
    with pytest.raises(ValueError, match="recovery point"):
        next_step(point)


def test_phases_are_listed_in_the_order_they_happen() -> None:
    assert [p.value for p in Phase] == [
        "ADMITTED",
        "H1_DONE",
        "EXT1_SENT",
        "EXT1_CALLED",
        "EXT1_DONE",
        "H2_DONE",
        "EXT2_SENT",
        "EXT2_CALLED",
        "EXT2_DONE",
        "FINISHED",
    ]


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (5, "5"),  # delta-seconds
        (5.0, "5"),
        (0, "0"),
        (1.5, "1.5"),  # not valid delta-seconds, sent anyway: clients must cope
        (-3, "-3"),
        (float("nan"), "nan"),
        ("soon", "soon"),  # garbage, verbatim
        (datetime(2015, 10, 21, 7, 28, tzinfo=UTC), "Wed, 21 Oct 2015 07:28:00 GMT"),
        (  # another zone is converted to GMT
            datetime(2015, 10, 21, 9, 28, tzinfo=timezone(timedelta(hours=2))),
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ),
    ],
)
def test_retry_after_renders_every_form(value: float | str | datetime, rendered: str) -> None:
    assert render_retry_after(value) == rendered


def test_retry_after_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        render_retry_after(datetime(2015, 10, 21, 7, 28))
