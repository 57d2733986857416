"""What the batch does with each row before anything is sent: the pure decisions."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest

from idemclient import RetryPolicy, State, key_from_identity
from idemclient._fingerprint import fingerprint
from idemclient._store import OperationRecord, StoredResponse
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch
from idemclient.batch._identity import identify, is_batch_operation, legacy_key
from idemclient.batch._lookup import next_wait
from idemclient.batch._matching import matches_payment
from idemclient.batch._plan import (
    JSON_BODY,
    Request,
    RowAction,
    differences,
    legacy_candidates,
    past_retention,
    plan_row,
)
from idemclient.keys import DEFAULT_NAMESPACE

NOW = 1_800_000_000.0
DAY = 86_400.0
URL = "http://psp.test/v1/payouts"
ROW = {"ref": "E1", "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}


def row_of(scope: str | None = None, **changes: object) -> Any:
    batch = Batch.from_records([{**ROW, **changes}], reference=scope)
    return batch.rows[0]


def request_of(payload: dict[str, Any], url: str = URL) -> Request:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Request(url, body, payload)


def record(
    payload: dict[str, Any] | None = None,
    *,
    state: State = State.SUCCEEDED,
    url: str = URL,
    status: int | None = 201,
    maybe_applied: bool = False,
    created_at: float = NOW - 60,
    operation_id: str = "batch/payout/E1",
    key: str | None = None,
    reference: str = "E1",
    body: bytes | None = None,
    attempts: int = 1,
) -> OperationRecord:
    payload = payload if payload is not None else row_of().payload()
    raw = json.dumps(payload, separators=(",", ":")).encode() if body is None else body
    content = raw or json.dumps(payload, separators=(",", ":")).encode()
    return OperationRecord(
        operation_id=operation_id,
        key=key or key_from_identity("E1", "payout"),
        method="POST",
        url=url,
        headers=(),
        body=raw,
        fingerprint=fingerprint("POST", httpx.URL(url), content, content_type=JSON_BODY),
        reference=reference,
        state=state,
        attempts=attempts,
        maybe_applied=maybe_applied,
        evidence="",
        not_before=None,
        lease_owner=None,
        lease_expires=None,
        response=None if status is None else StoredResponse.of(status, (), b"{}"),
        created_at=created_at,
        updated_at=created_at,
        finished_at=created_at if state.finished else None,
    )


def plan(known: OperationRecord | None, **options: Any) -> Any:
    row = row_of()
    identity = identify(row, scope=None, operation="payout", namespace=DEFAULT_NAMESPACE)
    request = options.pop("request", request_of(row.payload()))
    return plan_row(
        identity,
        lambda: request,
        known=known,
        now=NOW,
        retention=DAY,
        **{"look_up": True, **options},
    )


# -- identity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "reference", "operation_id"),
    [
        (None, "E1", "batch/payout/E1"),
        ("2026-11", "2026-11/E1", "batch/payout/2026-11/E1"),
    ],
)
def test_a_row_is_its_reference_within_its_scope_never_its_file_or_date(
    scope: str | None, reference: str, operation_id: str
) -> None:
    one = identify(row_of(scope), scope=scope, operation="payout", namespace=DEFAULT_NAMESPACE)
    later = identify(
        row_of(scope, value_date="2026-12-31", amount=5),
        scope=scope,
        operation="payout",
        namespace=DEFAULT_NAMESPACE,
    )
    assert one == later  # content is not identity
    assert (one.bare, one.reference, one.operation_id) == ("E1", reference, operation_id)
    assert one.key == key_from_identity(reference, "payout")
    assert is_batch_operation(one.operation_id)
    assert not is_batch_operation(one.key)


def test_the_earlier_versions_key_is_known() -> None:
    key = legacy_key(
        row_of(), batch_reference="payroll-2026-11", operation="payout", namespace=DEFAULT_NAMESPACE
    )
    assert key == key_from_identity("payroll-2026-11", "E1", "payout", "2026-11-30")


# -- the table of plan_row --------------------------------------------------------------


@pytest.mark.parametrize(
    ("known", "step", "look_up"),
    [
        # nothing known: look it up, then send
        (None, RowAction.NEW, True),
        # finished: its answer stands, nothing is sent, no look-up
        (record(), RowAction.DONE, False),
        (record(state=State.FAILED, status=400), RowAction.DONE, False),
        (record(state=State.FAILED, status=404), RowAction.DONE, False),  # same URL: stays
        # refused for its target at another URL, never applied: the corrected request
        (
            record(state=State.FAILED, status=404, url="http://psp.test/v1/payout"),
            RowAction.REOPEN,
            False,
        ),
        (
            record(state=State.FAILED, status=405, url="http://other.test/v1/payouts"),
            RowAction.REOPEN,
            False,
        ),
        # refused credentials: the token may have been fixed (it is never stored)
        (record(state=State.FAILED, status=401), RowAction.REOPEN, False),
        # refused at another URL after an attempt that may have been applied: never
        # reopened; and at another origin, not done here unless found here
        (
            record(state=State.FAILED, status=404, maybe_applied=True, url="http://psp.test/v1/p"),
            RowAction.DONE,
            False,
        ),
        (
            record(
                state=State.FAILED, status=404, maybe_applied=True, url="http://x.test/v1/payouts"
            ),
            RowAction.ELSEWHERE,
            True,
        ),
        # finished at another origin (a sandbox): looked up here, done only if found
        (record(url="https://sandbox.psp.test/v1/payouts"), RowAction.ELSEWHERE, True),
        (
            record(state=State.FAILED, status=422, url="http://x.test/v1/payouts"),
            RowAction.ELSEWHERE,
            True,
        ),
        # at this origin, another path: the same server, done
        (record(url="http://psp.test/v2/payouts"), RowAction.DONE, False),
        # unfinished at this URL: its own request and key; looked up when its first
        # send is to come, when it may have been applied, and when old
        (record(state=State.PENDING, status=None), RowAction.KNOWN, False),
        (record(state=State.PENDING, status=None, attempts=0), RowAction.KNOWN, True),
        (record(state=State.IN_FLIGHT, status=None), RowAction.KNOWN, True),  # its sender died
        (record(state=State.INDETERMINATE, status=None, maybe_applied=True), RowAction.KNOWN, True),
        (
            record(state=State.NOT_SENT, status=None, created_at=NOW - 2 * DAY),
            RowAction.KNOWN,
            True,
        ),
        (
            record(state=State.PENDING, status=None, created_at=NOW + 30 * DAY),
            RowAction.KNOWN,
            True,
        ),
        # never applied at another URL: the corrected request
        (
            record(state=State.NOT_SENT, status=None, url="http://psp.test/v2/p"),
            RowAction.REOPEN,
            False,
        ),
        (
            record(state=State.PENDING, status=None, url="http://x/p", created_at=NOW - 2 * DAY),
            RowAction.REOPEN,
            True,
        ),
        # maybe applied at another URL: refused, to be finished where it went
        (
            record(state=State.INDETERMINATE, status=None, maybe_applied=True, url="http://x/p"),
            RowAction.REFUSED,
            False,
        ),
    ],
)
def test_plan_row(known: OperationRecord | None, step: RowAction, look_up: bool) -> None:
    planned = plan(known)
    assert (planned.decision, planned.look_up) == (step, look_up)
    assert planned.record is known


@pytest.mark.parametrize(
    ("known", "look_up", "step"),
    [
        # finished with other credentials (a test key, another account): looked up here
        (record(), True, RowAction.ELSEWHERE),
        (record(), False, RowAction.REFUSED),
        # refused for its credentials or target, never applied: sent again, same key
        (record(state=State.FAILED, status=404), True, RowAction.REOPEN),
        # never applied with the other credentials: pointed at this run's, same key
        (record(state=State.PENDING, status=None), True, RowAction.REOPEN),
        # maybe applied with the other credentials: finish it with them
        (
            record(state=State.INDETERMINATE, status=None, maybe_applied=True),
            True,
            RowAction.REFUSED,
        ),
    ],
)
def test_a_row_sent_with_other_credentials(
    known: OperationRecord, look_up: bool, step: RowAction
) -> None:
    planned = plan(known, look_up=look_up, other_credentials=lambda _record: True)
    assert planned.decision is step
    assert plan(known, look_up=look_up).decision is not step  # the same row, as this run's


def test_a_row_finished_elsewhere_says_where() -> None:
    sandbox = record(url="https://sandbox.psp.test/v1/payouts#sent-as=v1.00.00")
    planned = plan(sandbox, look_up=False)
    assert planned.decision is RowAction.REFUSED
    assert planned.why == "was paid (HTTP 201) at https://sandbox.psp.test, not at http://psp.test"
    assert "--store" in planned.advice
    assert "#" not in plan(record(state=State.FAILED, status=404, url=sandbox.url)).why


def test_with_look_ups_off_nothing_is_looked_up() -> None:
    assert not plan(None, look_up=False).look_up
    old = record(state=State.NOT_SENT, status=None, created_at=NOW - 2 * DAY)
    assert not plan(old, look_up=False).look_up


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"amount": 101}, "amount 100 -> 101"),
        ({"value_date": "2026-12-01"}, "value_date '2026-11-30' -> '2026-12-01'"),
        ({"currency": "EUR"}, "currency 'GBP' -> 'EUR'"),
        ({"account": "GB99"}, "account (none) -> 'GB99'"),
    ],
)
def test_a_known_reference_with_other_content_is_refused_showing_both(
    changes: dict[str, object], why: str
) -> None:
    new = row_of(**changes).payload()
    planned = plan(record(), request=request_of(new))
    assert planned.decision is RowAction.REFUSED
    assert planned.why == f"was submitted before with other content: {why}"


def test_a_reaped_body_is_compared_by_its_fingerprint() -> None:
    reaped = record(body=b"")
    assert plan(reaped).decision is RowAction.DONE
    changed = plan(reaped, request=request_of(row_of(amount=7).payload()))
    assert changed.decision is RowAction.REFUSED
    assert "old values cannot be shown" in changed.why


# -- rows recorded by earlier versions ----------------------------------------------------


def legacy(payload: dict[str, Any] | None = None, *, key: str = "k-old", **options: Any) -> Any:
    return record(payload, operation_id=key, key=key, **options)


def legacy_plan(
    candidates: list[OperationRecord], scope: str | None = None, **changes: object
) -> Any:
    row = row_of(scope, **changes)
    identity = identify(row, scope=scope, operation="payout", namespace=DEFAULT_NAMESPACE)
    old_key = (
        None
        if scope is None
        else legacy_key(row, batch_reference=scope, operation="payout", namespace=DEFAULT_NAMESPACE)
    )
    request = request_of(row.payload(identity.reference))
    return plan_row(
        identity,
        lambda: request,
        known=None,
        legacy=legacy_candidates(candidates, identity),
        scope=scope,
        legacy_key=old_key,
        now=NOW,
        retention=DAY,
    )


def test_an_earlier_versions_row_is_found_by_reference_and_keeps_its_key() -> None:
    old = legacy()
    planned = legacy_plan([old])
    assert (planned.decision, planned.record) == (RowAction.DONE, old)
    unfinished = legacy(state=State.PENDING, status=None)
    assert legacy_plan([unfinished]).decision is RowAction.KNOWN


def test_legacy_candidates_are_only_the_earlier_batch_commands_rows() -> None:
    identity = identify(row_of(), scope=None, operation="payout", namespace=DEFAULT_NAMESPACE)
    mine = record()  # this version's: found by its operation id, not here
    client_call = record(operation_id="order-7", key="k7")  # an application's operation
    other_reference = legacy(reference="E2")
    old = legacy()
    found = legacy_candidates([mine, client_call, other_reference, old], identity)
    assert found == [old]


def test_a_reference_repeated_in_an_old_store_is_refused_with_how_to_scope_it() -> None:
    november = legacy(key="k-nov")
    december = legacy(row_of(value_date="2026-12-31").payload(), key="k-dec")
    planned = legacy_plan([november, december], value_date="2027-01-31")
    assert planned.decision is RowAction.REFUSED
    assert "recorded 2 times" in planned.why
    assert "--batch-ref" in planned.why
    # The one with the very same content is this row.
    assert legacy_plan([november, december]).record is november


def test_in_a_scope_an_earlier_row_is_its_old_key_else_the_same_content_else_none() -> None:
    row = row_of("payroll-2026-11")
    old_key = legacy_key(
        row, batch_reference="payroll-2026-11", operation="payout", namespace=DEFAULT_NAMESPACE
    )
    exact = legacy(key=old_key, created_at=NOW - 1)
    other_month = legacy(row_of(value_date="2026-10-31").payload(), key="k-oct")
    assert legacy_plan([other_month, exact], scope="payroll-2026-11").record is exact
    same = legacy(key="k-renamed")  # this row, paid from a file of another name
    assert legacy_plan([other_month, same], scope="payroll-2026-11").record is same
    assert legacy_plan([other_month], scope="payroll-2026-11").decision is RowAction.NEW
    twice = legacy_plan([same, legacy(key="k-again")], scope="payroll-2026-11")
    assert twice.decision is RowAction.REFUSED


# -- content, age ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1, "reference": "x"}, {"a": 1, "reference": "s/x"}, []),  # identity, not content
        ({"a": 1}, {"a": 2}, ["a 1 -> 2"]),
        ({"a": "1"}, {"a": 1}, ["a '1' -> 1"]),
        ({"a": 1}, {}, ["a 1 -> (none)"]),
        ({"b": "x"}, {"a": 1, "b": "y"}, ["a (none) -> 1", "b 'x' -> 'y'"]),
    ],
)
def test_differences(before: dict[str, Any], after: dict[str, Any], changed: list[str]) -> None:
    assert differences(before, after) == changed


PAYLOAD = {"ref": "E1", "account": "GB1", "amount": 100, "currency": "GBP", "reference": "E1"}
KEY = "66a08689-fffa-5d8e-89d5-f2b6b06057a2"


@pytest.mark.parametrize(
    ("payment", "matches"),
    [
        ({**PAYLOAD, "id": "po_1", "status": "succeeded"}, True),
        # shows less: compared less, but it must show the reference (or the key)
        ({"amount": 100, "currency": "GBP", "reference": "E1", "id": "po_1"}, True),
        ({"amount": 100, "currency": "GBP", "idempotency_key": KEY}, True),
        ({"amount": 100, "currency": "GBP", "id": "po_1"}, False),  # shows no reference
        ({**PAYLOAD, "reference": "E2"}, False),  # another row's payment, same content
        ({**PAYLOAD, "reference": "E2", "idempotency_key": KEY}, True),  # its key says
        ({**PAYLOAD, "amount": 101}, False),
        ({**PAYLOAD, "currency": "EUR"}, False),
        ({**PAYLOAD, "account": "GB2"}, False),
        ({"account": "GB1", "currency": "GBP", "reference": "E1"}, False),  # no amount shown
        ({"amount": 100, "account": "GB1", "reference": "E1"}, False),  # no currency shown
        ({**PAYLOAD, "status": "declined", "id": "x"}, True),  # the server's own fields
    ],
)
def test_a_payment_found_counts_as_the_row_only_with_its_reference_and_content(
    payment: dict[str, Any], matches: bool
) -> None:
    assert matches_payment(PAYLOAD, payment, key=KEY) is matches


@pytest.mark.parametrize(
    ("payment", "field", "matches"),
    [
        (
            {"amount": 100, "currency": "GBP", "external_reference": "E1"},
            "external_reference",
            True,
        ),
        (
            {"amount": 100, "currency": "GBP", "external_reference": "E2"},
            "external_reference",
            False,
        ),
        ({"amount": 100, "currency": "GBP", "reference": "E1"}, "external_reference", False),
        ({"amount": 100, "currency": "GBP", "ref_no": 17}, "ref_no", False),
    ],
)
def test_the_field_holding_the_reference_is_named_by_the_look_up(
    payment: dict[str, Any], field: str, matches: bool
) -> None:
    assert matches_payment(PAYLOAD, payment, reference_field=field) is matches


@pytest.mark.parametrize(
    ("created_at", "past"),
    [
        (NOW - 60, False),
        (NOW - DAY + CLOCK_SKEW + 1, False),
        # its host may have been CLOCK_SKEW fast: it may be that much older than it looks
        (NOW - DAY + CLOCK_SKEW - 1, True),
        (NOW - DAY, True),
        (NOW + 1, True),  # in the future: the clock went back, or another's is ahead
    ],
)
def test_past_retention(created_at: float, past: bool) -> None:
    assert past_retention(record(created_at=created_at), now=NOW, retention=DAY) is past


def test_a_record_a_clock_went_back_over_is_past_retention_whatever_its_age() -> None:
    young = dataclasses.replace(record(created_at=NOW - 60), clock_stepped=2 * DAY)
    assert past_retention(young, now=NOW, retention=DAY)


# -- asking the server again ----------------------------------------------------------------


def response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


POLICY = RetryPolicy(max_attempts=4, initial_backoff=0.5, max_backoff=4.0)


@pytest.mark.parametrize(
    ("attempts", "result", "remaining", "wait"),
    [
        (1, response(200), 60.0, None),  # an answer: judged, not asked again
        (1, response(404), 60.0, None),
        (1, response(401), 60.0, None),
        (1, response(503), 60.0, 0.5),  # later: the backoff ceiling
        (2, response(502), 60.0, 1.0),
        (1, response(429, **{"retry-after": "3"}), 60.0, 3.0),  # the server's wait is a floor
        (1, response(429, **{"retry-after": "3600"}), 9999.0, None),  # past max_retry_after
        (1, httpx.ConnectError("refused"), 60.0, 0.5),  # no answer: ask again
        (1, httpx.ReadTimeout("slow"), 60.0, 0.5),
        (4, response(503), 60.0, None),  # attempts spent
        (1, response(503), 0.4, None),  # the wait would pass the deadline
        (1, ValueError("a bug"), 60.0, None),  # not a network failure: never retried
    ],
)
def test_a_look_up_is_asked_again_only_while_the_answer_says_later(
    attempts: int, result: httpx.Response | Exception, remaining: float, wait: float | None
) -> None:
    assert next_wait(POLICY, attempts, result, now=NOW, remaining=remaining) == wait


def test_a_look_up_is_asked_at_least_three_times_whatever_the_rows_attempts() -> None:
    once = RetryPolicy(max_attempts=1, initial_backoff=0.5)
    assert next_wait(once, 1, response(503), now=NOW, remaining=60) == 0.5
    assert next_wait(once, 2, response(503), now=NOW, remaining=60) == 1.0
    assert next_wait(once, 3, response(503), now=NOW, remaining=60) is None


def test_a_scope_counts_in_a_references_length() -> None:
    from idemclient.batch import BatchInvalid

    long = "r" * 250
    Batch.from_records([{**ROW, "ref": long}])
    with pytest.raises(BatchInvalid, match=r"over 255 characters with its scope \(2026-11/\)"):
        Batch.from_records([{**ROW, "ref": long}], reference="2026-11")


def test_the_payload_carries_the_scoped_reference() -> None:
    row = row_of("2026-11")
    assert row.payload()["reference"] == "E1"
    assert row.payload("2026-11/E1")["reference"] == "2026-11/E1"
    assert dataclasses.replace(row, reference="E9").payload()["ref"] == "E1"


# -- which payments a look-up names are this row's -------------------------------------------


def judged(*payments: dict[str, Any]) -> Any:
    from idemclient._reconcile import judge
    from idemclient.batch._lookup import refined

    answer = httpx.Response(200, json={"data": list(payments)})
    verdict = judge(answer, matches=lambda item: matches_payment(PAYLOAD, item, key=KEY))
    return refined(verdict, 200, reference="E1", key=KEY, reference_field="reference")


MINE = {**PAYLOAD, "id": "po_1", "status": "succeeded"}


@pytest.mark.parametrize(
    ("payments", "finding"),
    [
        ((), "not_found"),
        ((MINE,), "found"),
        ((MINE, {**MINE, "reference": "E2", "id": "po_2"}), "found"),  # others set aside
        (({**MINE, "reference": "E2"},), "not_found"),  # only other rows' payments
        (({**MINE, "reference": "E2"}, {**MINE, "reference": "E3"}), "not_found"),
        (({**MINE, "amount": 7},), "mismatch"),  # this reference, other content
        (({**MINE, "reference": "E2", "idempotency_key": KEY, "amount": 7},), "mismatch"),
        (({"amount": 100, "currency": "GBP", "id": "po_9"},), "unknown"),  # cannot tell
        (({**MINE, "reference": "E2"}, {"amount": 1, "currency": "GBP"}), "unknown"),
        ((MINE, {**MINE, "id": "po_2"}), "ambiguous"),
    ],
)
def test_a_look_up_counts_only_the_payments_that_show_this_row(
    payments: tuple[dict[str, Any], ...], finding: str
) -> None:
    verdict = judged(*payments)
    assert verdict.finding == finding, verdict.why
    if finding == "mismatch":
        assert all(
            item.get("reference") == "E1" or item.get("idempotency_key") == KEY
            for item in verdict.others
        )
    if finding == "unknown":
        assert "--lookup-reference-field" in verdict.why


@pytest.mark.parametrize(
    ("finding", "definite"),
    [
        ("found", True),
        ("not_found", True),
        ("mismatch", True),
        ("ambiguous", True),
        ("unknown", False),
        ("incomplete", False),  # a finding a later judgement may add: nothing is sent on it
    ],
)
def test_only_a_definite_finding_means_the_look_up_works(finding: str, definite: bool) -> None:
    from idemclient._reconcile import Verdict
    from idemclient.batch._lookup import works

    assert works(Verdict(finding, "why")) is definite  # type: ignore[arg-type]
