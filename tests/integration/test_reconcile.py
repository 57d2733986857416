"""Settling operations by looking them up on the server, never sending them twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    ReconcileRequired,
    RetryPolicy,
    State,
    profiles,
)
from idemclient._server_time import DATE_RESOLUTION
from idemclient._time import CLOCK_SKEW
from idemclient.testing import ReferenceServer

from ..support.shop import BY_REFERENCE, shop_client

PAYMENT = {"amount": 700, "currency": "EUR", "reference": "inv-77"}
DAY = 24 * 3600.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as running:
        yield running


def client(server: ReferenceServer, clock: ManualClock, store: Path) -> Client:
    return shop_client(server, clock, store, max_attempts=3)


def test_an_applied_payment_past_retention_is_settled_as_succeeded(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.drop(path="/v1/payments", times=3)  # applied every time, never answered
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        clock.advance(2 * DAY)  # the server's key may be gone
        with pytest.raises(ReconcileRequired, match="reconcile"):
            psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        outcome = psp.reconcile("order-77", lookup=BY_REFERENCE)
        assert outcome.state is State.SUCCEEDED
        assert outcome.response is not None
        assert outcome.response.json()["data"][0]["reference"] == "inv-77"
        again = psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        assert again.from_store
        assert again.state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_a_payment_never_applied_is_settled_as_not_sent_and_then_paid_once(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(500, times=3, path="/v1/payments")  # "maybe applied", but never processed
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        clock.advance(2 * DAY)
        settled = psp.reconcile("order-77", lookup=BY_REFERENCE)
        assert settled.state is State.NOT_SENT
        assert not settled.maybe_applied
        assert "settled by look-up" in settled.evidence
        paid = psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        assert paid.state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_an_unclear_lookup_changes_nothing(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.drop(path="/v1/payments", times=3)
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="order-77", reference="inv-77")
        server.answer(503, path="/v1/payments")  # the look-up itself meets trouble
        with pytest.raises(Indeterminate, match="HTTP 503"):
            psp.reconcile("order-77", lookup=BY_REFERENCE)
        record = psp.store.get("order-77")
        assert record is not None
        assert record.state is State.INDETERMINATE
        assert record.maybe_applied
        assert record.lease_owner is None


def test_lookup_by_key_and_bad_templates(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.drop(path="/v1/payments", times=3)
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="no-ref")
        with pytest.raises(ValueError, match="no end-to-end reference"):
            psp.reconcile("no-ref", lookup=BY_REFERENCE)
        with pytest.raises(ValueError, match="only use"):
            psp.reconcile("no-ref", lookup="/v1/payments?id={id}")
        with pytest.raises(ValueError, match="no operation"):
            psp.reconcile("unknown", lookup=BY_REFERENCE)
        outcome = psp.reconcile("no-ref", lookup="/v1/payments?idempotency_key={key}")
        assert outcome.state is State.SUCCEEDED
        # Finished already: the stored outcome, no look-up.
        assert psp.reconcile("no-ref", lookup="/v1/payments?idempotency_key={key}").from_store


def test_a_custom_judge_of_what_was_found_still_works_but_is_deprecated(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.drop(path="/v1/payments", times=3)
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        seen: list[httpx.Response] = []

        def found(response: httpx.Response) -> bool:
            seen.append(response)
            return response.json()["data"][0]["amount"] == 700

        with pytest.warns(DeprecationWarning, match="statuses="):
            assert psp.reconcile("o", lookup=BY_REFERENCE, found=found).succeeded
        assert len(seen) == 1


def test_a_declined_payment_is_settled_as_failed_not_succeeded(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.external_fault(1, "decline")
    server.drop(path="/v1/payments", times=3)  # declined on the server, every answer lost
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        outcome = psp.reconcile("o", lookup=BY_REFERENCE)
        assert outcome.state is State.FAILED
        assert outcome.response is not None
        assert outcome.response.json()["data"][0]["status"] == "declined"
        assert "status 'declined'" in outcome.evidence
        record = psp.store.get("o")
        assert record is not None
        assert record.state is State.FAILED
        # Final: issued again, it is answered from the store, never sent.
        again = psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        assert (again.state, again.from_store) == (State.FAILED, True)
    assert len(server.ledger()) == 1


def test_a_payment_still_pending_on_the_server_stays_unsettled_and_maybe_applied(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.crash("H1_DONE", path="/v1/payments")  # created (pending), then the worker died
    server.answer(503, path="/v1/payments", times=2)
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        with pytest.raises(Indeterminate, match="status 'pending', which is not final"):
            psp.reconcile("o", lookup=BY_REFERENCE)
        record = psp.store.get("o")
        assert record is not None
        assert record.state is State.INDETERMINATE
        assert record.maybe_applied
        assert record.lease_owner is None
        # Once the server finishes it, the same look-up settles it.
        server.advance(server.lease + 1)
        server.recover()
        assert psp.reconcile("o", lookup=BY_REFERENCE).state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_a_404_from_the_lookup_itself_is_not_not_found_unless_the_caller_says_so(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(500, times=3, path="/v1/payments")  # maybe applied; in fact not
    wrong = "/v1/payment?reference={reference}"  # a typo: the server answers 404
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        with pytest.raises(Indeterminate, match="HTTP 404: the look-up itself was not found"):
            psp.reconcile("o", lookup=wrong)
        record = psp.store.get("o")
        assert record is not None
        assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
        # A look-up whose 404 means "no such payment", said so by the caller, once the
        # server has had its time to finish the attempt (see test_early_look_up).
        by_id = "/v1/payments/{reference}"
        with pytest.raises(Indeterminate, match="may still be running it"):
            psp.reconcile("o", lookup=by_id, reliable_404=True)
        # (and by the server's clock too: its Date has whole seconds, read as the
        # earliest the time may be)
        clock.advance(profiles.reference.in_flight_for + CLOCK_SKEW + DATE_RESOLUTION)
        settled = psp.reconcile("o", lookup=by_id, reliable_404=True)
        assert (settled.state, settled.maybe_applied) == (State.NOT_SENT, False)
    assert server.ledger() == ()


def test_the_status_mapping_is_the_callers_to_change(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.crash("H2_DONE", path="/v1/payments")  # left "authorized" on the server
    server.answer(503, path="/v1/payments", times=2)
    with client(server, clock, tmp_path / "s.db") as psp:
        with pytest.raises(Indeterminate):
            psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        with pytest.raises(Indeterminate, match="'authorized'"):
            psp.reconcile("o", lookup=BY_REFERENCE)
        outcome = psp.reconcile("o", lookup=BY_REFERENCE, statuses={"AUTHORIZED": State.SUCCEEDED})
        assert outcome.state is State.SUCCEEDED
        with pytest.raises(ValueError, match="succeeded or failed"):
            psp.reconcile("o", lookup=BY_REFERENCE, statuses={"pending": State.NOT_SENT})


@pytest.mark.anyio
async def test_async_reconcile(server: ReferenceServer, clock: ManualClock, tmp_path: Path) -> None:
    server.drop(path="/v1/payments", times=3)
    async with AsyncClient(
        base_url="https://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer shop-1"},
        store=tmp_path / "s.db",
        clock=clock,
        policy=RetryPolicy(max_attempts=3),
    ) as psp:
        with pytest.raises(Indeterminate):
            await psp.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-77")
        outcome = await psp.reconcile("o", lookup=BY_REFERENCE)
    assert outcome.state is State.SUCCEEDED
