"""Attacks on the in-flight window with its clock skew (`_call.in_flight_until`) and on
a look-up's own lease: histories where the window's wait, or a look-up's answer, is
taken as leave to send an operation that may have been applied, at a time when the
server may have forgotten its key."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    OutcomeError,
    RetryPolicy,
    State,
    profiles,
)
from idemclient._store import Intent, new_owner, release_owner
from idemclient._time import CLOCK_SKEW, LEASE_MARGIN
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

from ...support.shop import shop_client

PAYMENT = {"amount": 700, "currency": "EUR", "reference": "inv-9"}
RETENTION = 3600.0
#: a server that keeps keys an hour (Mollie's) and does not refuse a key in flight
UNGUARDED = profiles.reference.replace(
    name="unguarded-hour", guards_in_flight=False, key_retention=RETENTION
)
#: the hold after a send that may have been applied: in_flight_for and the skew
HELD = UNGUARDED.in_flight_for + CLOCK_SKEW


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    # It forgets a key past its retention (and the skew it allows), and its external
    # systems move money again for a payment sent after that: a second effect shows.
    with ReferenceServer(clock=clock, profile=UNGUARDED, external_retention=RETENTION) as psp:
        yield psp


def _client(server: ReferenceServer, clock: ManualClock, store: Path, **policy: float) -> Client:
    return shop_client(server, clock, store, profile=UNGUARDED, max_attempts=1, **policy)


def test_a_hold_waited_out_within_the_deadline_does_not_send_past_the_key_retention(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    created = clock.time()
    with _client(server, clock, store) as client:
        server.drop(path="/v1/payments")  # applied, then the connection lost
        with pytest.raises(OutcomeError):
            client.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")
        # Resumed near the end of the retention: answered 500 without being run, so
        # maybe applied again, sent just now, and held for the window from here.
        clock.advance(RETENTION - 700.0)
        server.answer(500, path="/v1/payments")
        [held] = client.resume()
    assert held.state is State.INDETERMINATE
    assert held.not_before == pytest.approx(created + RETENTION - 700.0 + HELD)
    # Resumed again while it is still young enough to be sent (its age and the skew
    # within the retention), by a worker whose deadline covers the rest of the hold.
    clock.advance(350.0)
    assert clock.time() - created + CLOCK_SKEW < RETENTION
    with _client(server, clock, store, deadline=2 * HELD, max_retry_after=2 * HELD) as worker:
        outcomes = worker.resume()
    payments = [e for e in server.ledger() if e.reference == "inv-9"]
    assert len(payments) == 1, f"paid {len(payments)} times: {outcomes}"
    # Not sent once past the retention: left to be looked up.
    assert [o.state for o in outcomes] == [State.INDETERMINATE]


def test_a_slow_look_up_s_none_is_judged_as_of_its_question_not_its_answer(
    clock: ManualClock, tmp_path: Path
) -> None:
    # The look-up is asked 5 s before the window ends; the server lists nothing, then
    # runs the payment it had admitted, and the answer ("none") arrives 30 s later,
    # after the window. Judged by its arrival, it settled the payment never applied.
    with ReferenceServer(clock=clock) as server:

        def slow(request: httpx.Request) -> httpx.Response:
            answer = server.transport.handle_request(request)
            if request.method == "GET":
                answer.read()
                server.recover()  # the admitted payment runs meanwhile
                clock.advance(30.0)
            return answer

        reference = profiles.reference
        with Client(
            base_url="https://psp.test",
            transport=httpx.MockTransport(slow),
            headers={"Authorization": "Bearer shop-1"},
            store=tmp_path / "s.db",
            clock=clock,
            profile=reference,
            policy=RetryPolicy(max_attempts=1),
        ) as client:
            server.crash("ADMITTED", path="/v1/payments")
            with pytest.raises(OutcomeError):
                client.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")
            clock.advance(reference.in_flight_for + CLOCK_SKEW - 5.0)
            with pytest.raises(Indeterminate) as early:
                client.reconcile("o", lookup="/v1/payments?reference={reference}")
            assert early.value.outcome.maybe_applied
            assert "may have run it since the look-up was asked" in str(early.value)
            record = client.store.get("o")
        assert record is not None
        assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
        assert len(server.ledger()) == 1


def test_a_retry_wait_does_not_carry_a_maybe_applied_send_past_the_key_retention(
    clock: ManualClock, tmp_path: Path
) -> None:
    guarded = UNGUARDED.replace(name="guarded-hour", guards_in_flight=True)
    with ReferenceServer(clock=clock, profile=guarded, external_retention=RETENTION) as server:

        def client(**policy: float) -> Client:
            return shop_client(server, clock, tmp_path / "s.db", profile=guarded, **policy)

        with client(max_attempts=1) as first:
            server.drop(path="/v1/payments")  # applied, then the connection lost
            with pytest.raises(OutcomeError):
                first.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")
        # Resumed while young enough; the server is busy and asks for 800 s.
        clock.advance(RETENTION - CLOCK_SKEW - 100.0)
        server.answer(503, path="/v1/payments", retry_after=800)
        with client(max_attempts=3, deadline=2000.0, max_retry_after=2000.0) as worker:
            outcomes = worker.resume()
        payments = [e for e in server.ledger() if e.reference == "inv-9"]
    assert len(payments) == 1, f"paid {len(payments)} times: {outcomes}"
    assert [o.state for o in outcomes] == [State.INDETERMINATE]


def test_a_look_up_that_lost_its_lease_to_a_send_does_not_report_it_settled(
    clock: ManualClock, tmp_path: Path
) -> None:
    with ReferenceServer(clock=clock) as server:

        def client(transport: httpx.BaseTransport) -> Client:
            return Client(
                base_url="https://psp.test",
                transport=transport,
                headers={"Authorization": "Bearer shop-1"},
                store=tmp_path / "s.db",
                clock=clock,
                policy=RetryPolicy(max_attempts=1),
            )

        with client(server.transport) as sender:

            def slow(request: httpx.Request) -> httpx.Response:
                answer = server.transport.handle_request(request)
                answer.read()
                clock.advance(LEASE_MARGIN + 20.0)  # the look-up's lease runs out
                server.answer(500, path="/v1/payments")  # never run: no payment
                sender.resume()  # another caller sends it meanwhile
                return answer

            server.answer(503, path="/v1/payments")  # not sent, never applied
            with pytest.raises(OutcomeError):
                sender.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")
            with client(httpx.MockTransport(slow)) as looker:
                try:
                    outcome = looker.reconcile("o", lookup="/v1/payments?reference={reference}")
                    state = outcome.state
                except Indeterminate as exc:
                    state = exc.outcome.state
                    settled = False
                else:
                    settled = True
            record = sender.store.get("o")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
    assert not settled, f"reported settled as {state}"


def test_a_send_s_lease_left_marked_as_a_look_up_by_an_older_process_is_read_as_a_send(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    now = 1_000.0
    with SQLiteStore(path) as store:
        store.begin(
            Intent(
                operation_id="o",
                key="k-1",
                key_given=True,
                method="POST",
                url="https://psp.test/v1/payments",
                headers=(),
                body=b"{}",
                fingerprint="f",
            ),
            owner="gone:1:t:1",
            now=now,
            lease_until=now + 1,
        )
        looker = new_owner()
        store.claim("o", owner=looker, now=now + 5, lease_until=now + 15, look_up=True)
        release_owner(looker)  # the look-up's process is gone
    # The previous version's takeover (its statement knows no look-up mark): in flight,
    # under a sender of another host, which then dies before it could say anything.
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE operations SET state = 'in_flight', lease_owner = 'old-host:7:t:1',"
            " lease_expires = ?, updated_at = ? WHERE id = 'o'",
            (now + 60, now + 20),
        )
    with SQLiteStore(path) as store:
        held = store.get("o")
        assert held is not None
        taken = store.claim("o", owner=new_owner(), now=now + 100, lease_until=now + 200)
    assert held.lease_look_up is False, "a lease in flight is a send's"
    assert taken.taken_over
    assert (taken.record.maybe_applied, taken.record.sent_at) == (True, now + 60)


def test_reconcile_does_not_judge_an_operation_by_another_profile_s_window(
    clock: ManualClock, tmp_path: Path
) -> None:
    django = profiles.BUILTIN["django-idempotency-key"]  # two requests with one key both run
    own = django.replace(name="my-psp", in_flight_for=3600.0)
    with ReferenceServer(clock=clock, profile=django) as server:

        def client(profile: profiles.Profile) -> Client:
            return Client(
                base_url="https://psp.test",
                transport=server.transport,
                headers={"Authorization": "Bearer shop-1"},
                store=tmp_path / "s.db",
                clock=clock,
                profile=profile,
                policy=RetryPolicy(max_attempts=1),
            )

        with client(own) as app:
            server.crash("ADMITTED", path="/v1/payments")  # admitted, not run yet
            with pytest.raises(OutcomeError):
                app.post("/v1/payments", json=PAYMENT, operation_id="o", reference="inv-9")
            # Past the default window, well within the operation's own (an hour).
            clock.advance(django.in_flight_for + CLOCK_SKEW + 10.0)
            with client(profiles.reference) as ops, contextlib.suppress(Indeterminate, ValueError):
                ops.reconcile("o", lookup="/v1/payments?reference={reference}")
            clock.advance(60.0)
            server.recover()  # the server runs the request it admitted, within its hour
            app.resume()
        payments = [e for e in server.ledger() if e.reference == "inv-9"]
    assert len(payments) == 1, f"paid {len(payments)} times"
