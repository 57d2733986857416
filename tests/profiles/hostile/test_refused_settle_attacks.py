"""Attacks on the django-idempotency-key "refused" settle: a 409 to a caller's key that
no attempt of ours explains, looked up by reference and not found once nothing of ours
can still be running, is settled `failed`, "never applied", and never sent again.
Histories where that word is wrong: a payment for the row exists, and the operator,
told the row failed, pays it again by hand."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, State, key_from_identity, profiles
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch, submit
from idemclient.testing import ReferenceServer

from ...support.shop import shop_client
from ..scripted import Scripted

NAME = "django-idempotency-key"
WINDOW = profiles.BUILTIN[NAME].in_flight_for + CLOCK_SKEW + 1.0
# The application's own 409 for a number it already holds: the refusal says that an
# order with this number exists.
DUPLICATE = json.dumps({"detail": "an order with this number exists"}).encode()


def _row(reference: str) -> Batch:
    return Batch.from_records(
        [{"ref": reference, "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}]
    )


def test_a_duplicate_number_refusal_the_look_up_cannot_see_points_at_what_it_conflicts_with(
    clock: ManualClock, tmp_path: Path
) -> None:
    with ReferenceServer(clock=clock, profile=NAME) as server:
        # Another system of the shop paid E0100 as a payment, under a key of its own.
        with shop_client(server, clock, tmp_path / "erp.db", profile=NAME) as erp:
            paid = erp.post(
                "/v1/payments", json={"amount": 100, "currency": "GBP", "reference": "E0100"}
            )
        assert paid.status_code == 201
        # The application's uniqueness spans its collections: the payout row with that
        # number is refused, every time, with its own 409.
        server.answer(
            409,
            times=100,
            key=key_from_identity("E0100", "payout"),
            headers={"Content-Type": "application/json"},
            body=DUPLICATE,
        )
        with shop_client(
            server, clock, tmp_path / "payroll.db", profile=NAME, max_attempts=1
        ) as client:
            reports = []
            for _ in range(2):
                reports.append(submit(_row("E0100"), client))
                clock.advance(WINDOW)
        ledger = server.ledger()
    # One payment of E0100 exists, the other system's. This row's request was refused
    # and never applied: `failed` (left unsettled, it would be refused on every run, for
    # ever), with a reason that does not let the operator read "refused" as "unpaid":
    # the conflict may name a payment made elsewhere, and the row says where its body is.
    assert [entry.reference for entry in ledger] == ["E0100"]
    rows = [report.rows[0] for report in reports]
    assert [row.state for row in rows] == ["indeterminate", "failed"]
    assert reports[1].exit_code == 4
    assert "may exist elsewhere, outside what the look-up searched" in rows[1].reason
    assert "idemclient ops show batch/payout/E0100" in rows[1].reason


def _none_found(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=[])


def test_a_409_kept_from_an_earlier_send_is_not_the_answer_to_a_later_one(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    # The 409 kept from the first send stops being the operation's answer once it is
    # sent again: that send timed out (its answer unknown, never a refusal), so a look-up
    # by reference that finds nothing settles it `not_sent`, not `failed` "refused by the
    # application" (which is never sent again).
    body = {"number": 21, "reference": "R21"}
    server = Scripted(
        httpx.Response(409, json={"detail": "locked, try later"}),
        httpx.ReadTimeout,
        get=_none_found,
    )
    client = make(server, NAME)
    with pytest.raises(Indeterminate):
        client.post("/orders", json=body, key="order-21", operation_id="o-21", reference="R21")
    clock.advance(WINDOW)
    # A look-up by key finds nothing: never applied, sent again with its key.
    assert client.reconcile("o-21", lookup="/v1/orders?key={key}").state is State.NOT_SENT
    with pytest.raises(Indeterminate):
        client.post("/orders", json=body, key="order-21", operation_id="o-21", reference="R21")
    clock.advance(WINDOW)
    outcome = client.reconcile("o-21", lookup="/v1/orders?reference={reference}")
    assert len(server.posts) == 2
    # Nothing applied, and the last request was never refused: safe to send again.
    assert (outcome.state, outcome.maybe_applied) == (State.NOT_SENT, False)
    assert "409" not in outcome.evidence


@pytest.mark.parametrize(
    "lookup",
    [
        "/v1/payouts?reference={reference}",
        # By key, after the server forgot it: "not_sent" would send it again, a new payment.
        "/v1/payments?key={key}",
    ],
    ids=["by-reference", "by-key"],
)
def test_a_kept_409_that_names_a_payment_is_never_settled_by_a_look_up_that_misses_it(
    make: Callable[..., Client], clock: ManualClock, lookup: str
) -> None:
    # The 409 is another sender's payment replayed, and its body names it (pay_31). A
    # look-up by reference that does not list it (another collection, an index not
    # caught up) settles nothing: `failed`, "never applied", would have the caller pay
    # again; `not_sent` would send it again once the server has forgotten the key.
    replayed = {"id": "pay_31", "reference": "R31", "amount": 100, "status": "succeeded"}
    server = Scripted(httpx.Response(409, json=replayed), get=_none_found)
    client = make(server, NAME)
    with pytest.raises(Indeterminate):
        client.post(
            "/v1/payments",
            json={"amount": 100, "reference": "R31"},
            key="order-31",
            operation_id="o-31",
            reference="R31",
        )
    clock.advance(WINDOW)
    with pytest.raises(Indeterminate) as raised:
        client.reconcile("o-31", lookup=lookup)
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied) == (State.INDETERMINATE, True)
    assert "pay_31" in str(raised.value)
    assert len(server.posts) == 1


def test_a_batch_row_whose_409_names_the_payment_is_not_failed_by_a_look_up_that_misses_it(
    clock: ManualClock, tmp_path: Path
) -> None:
    # Another machine paid the row (the same reference, so the same key) seconds ago;
    # here, the server replays it: a 409 whose body is that payout. The look-up given
    # lists payments, not payouts: it never finds it, and the row is not `failed`.
    with ReferenceServer(clock=clock, profile=NAME) as server:
        with shop_client(server, clock, tmp_path / "elsewhere.db", profile=NAME) as other:
            assert submit(_row("E0300"), other).exit_code == 0
        clock.advance(10.0)
        with shop_client(
            server, clock, tmp_path / "here.db", profile=NAME, max_attempts=1
        ) as client:
            reports = []
            for _ in range(2):
                reports.append(
                    submit(_row("E0300"), client, lookup="/v1/payments?reference={reference}")
                )
                clock.advance(WINDOW)
        ledger = server.ledger()
    assert len(ledger) == 1
    rows = [report.rows[0] for report in reports]
    assert [row.state for row in rows] == ["indeterminate", "indeterminate"]
    # Every rerun would ask the same look-up and miss it again: the operator's to settle.
    assert reports[1].exit_code == 5
    assert rows[1].reconcile
    assert ledger[0].resource_id in rows[1].reason
    assert "idemclient ops reconcile batch/payout/E0300 --store" in rows[1].reason
