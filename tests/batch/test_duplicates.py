"""The same payment under another identity: which records of the store are a row's
twins (the very same content under another reference), found by any of its values in
any scope."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest

from idemclient import State
from idemclient._fingerprint import bytes_fingerprint, fingerprint
from idemclient._store import Intent, OperationRecord
from idemclient.batch import Batch
from idemclient.batch._duplicates import by_tail, duplicate_problem, duplicates, tails_of
from idemclient.batch._identity import identify
from idemclient.batch._plan import JSON_BODY, Request, encode_body
from idemclient.keys import DEFAULT_NAMESPACE

URL = "http://psp.test/v1/payouts"
ROW = {"ref": "E1", "employee": "X7", "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}


def row_of(scope: str | None = None, column: str = "ref", **changes: object) -> Any:
    batch = Batch.from_records([{**ROW, **changes}], reference=scope, reference_column=column)
    return batch.rows[0]


def recorded(
    reference: str,
    *,
    reaped: bool = False,
    operation_id: str | None = None,
    state: State = State.SUCCEEDED,
    **changes: object,
) -> OperationRecord:
    payload = {**row_of(**changes).payload(), "reference": reference}
    body = encode_body(payload)
    return OperationRecord(
        operation_id=operation_id or f"batch/payout/{reference}",
        key=f"k-{reference}",
        method="POST",
        url=URL + "#sent-as=v1.00.00",
        headers=(),
        body=b"" if reaped else body,
        fingerprint=fingerprint("POST", httpx.URL(URL), body, content_type=JSON_BODY),
        reference=reference,
        state=state,
        attempts=1,
        maybe_applied=False,
        evidence="",
        not_before=None,
        lease_owner=None,
        lease_expires=None,
        response=None,
        created_at=1.0,
        updated_at=1.0,
        finished_at=1.0,
    )


def request_of(record: OperationRecord) -> Intent:
    """What the store's `find_requests` gives for `record`."""
    return Intent(
        record.operation_id,
        record.key,
        True,
        record.method,
        record.url,
        record.headers,
        record.body,
        record.fingerprint,
        record.reference,
    )


def twins_of(records: list[OperationRecord], scope: str | None = None, column: str = "ref") -> Any:
    row = row_of(scope, column)
    identity = identify(row, scope=scope, operation="payout", namespace=DEFAULT_NAMESPACE)
    payload = row.payload(identity.reference)
    request = Request(URL, encode_body(payload), payload)
    index = by_tail([request_of(record) for record in records], "payout")
    found = duplicates(identity, row, request, index)
    by_id = {record.operation_id: record for record in records}
    return [by_id[twin.operation_id] for twin in found]


def test_a_rows_values_are_where_its_reference_may_have_come_from() -> None:
    assert tails_of(row_of()) == {"E1", "X7", "100", "GBP", "2026-11-30"}


@pytest.mark.parametrize("reaped", [False, True], ids=["body kept", "body reaped"])
@pytest.mark.parametrize(
    ("stored", "scope", "column"),
    [
        ("E1", "2026-11", "ref"),  # a scope added
        ("2026-11/E1", None, "ref"),  # removed
        ("2026-11/E1", "nov", "ref"),  # changed
        ("a/b/E1", "a", "ref"),  # a scope holding a "/"
        ("E1", None, "employee"),  # another reference column
        ("2026-11/X7", None, "ref"),  # both
    ],
)
def test_the_same_content_under_another_reference_is_a_twin(
    stored: str, scope: str | None, column: str, reaped: bool
) -> None:
    twin = recorded(stored, reaped=reaped)
    assert twins_of([twin], scope, column) == [twin]


def test_a_kept_body_is_compared_column_by_column_in_any_order() -> None:
    twin = recorded("2026-11/E1")
    reordered = json.loads(twin.body)
    body = encode_body(dict(reversed(list(reordered.items()))))
    made = fingerprint("POST", httpx.URL(URL), body, content_type=JSON_BODY)
    moved = dataclasses.replace(twin, body=body, fingerprint=made)
    assert twins_of([moved]) == [moved]
    # Reaped, by its fingerprint, which is of the body's meaning: any order too...
    reaped = dataclasses.replace(moved, body=b"")
    assert twins_of([reaped]) == [reaped]
    # ... but one an earlier version made over the body's bytes finds only the same bytes.
    old = dataclasses.replace(reaped, fingerprint=bytes_fingerprint("POST", httpx.URL(URL), body))
    assert twins_of([old]) == []


def test_only_the_very_same_content_of_the_same_operation_is_a_twin() -> None:
    assert twins_of([recorded("E1")]) == []  # itself
    other_month = recorded("2026-10/E1", value_date="2026-10-31")
    other_amount = recorded("2026-10/E1", reaped=True, amount=101)
    refund = recorded("2026-11/E1", operation_id="batch/refund/2026-11/E1")
    elsewhere = recorded("2026-11/E1x")  # a reference that only ends like it
    assert twins_of([other_month, other_amount, refund, elsewhere], "2026-11") == []
    # An earlier version's row (its operation id its key) counts too.
    legacy = recorded("E1", operation_id="k-E1")
    assert twins_of([legacy], "2026-11") == [legacy]


def test_a_twin_is_named_with_what_became_of_it() -> None:
    row = row_of("2026-11")
    identity = identify(row, scope="2026-11", operation="payout", namespace=DEFAULT_NAMESPACE)
    problem = duplicate_problem(identity, [recorded("E1"), recorded("x/E1", state=State.PENDING)])
    assert problem.startswith("reference '2026-11/E1' is the very same payment as 'E1' (paid at")
    assert "'x/E1' (recorded, not paid yet at http://psp.test" in problem
