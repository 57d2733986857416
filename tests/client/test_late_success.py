"""A final success is the truth about the money: it wins over a refusal stored first.

The history (found by the checker, ietf, seed 982998114): caller A sends, the server
pays, and A is paused past its lease before its answer is stored; caller B takes the
operation over and is refused in front of the server (a 400 from something that keeps
no refusal under the key), and B stores the refusal. Then A's own answer, a 2xx,
arrives. A is told its own success, the store keeps `succeeded`, and every later read
(`operation`, `resume`, `idemclient ops`) says so; the server's ledger holds one payment.
B was told "failed" at the time: that is history, and nothing can take it back.

Through the public clients, against the reference server in-process (its ledger
counted), with a transport in front of it that holds A's answer and refuses B's
request; the clock is a `ManualClock`, and every wait on a gate is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from idemclient import Indeterminate, ManualClock, State
from idemclient.cli import main
from idemclient.testing import ReferenceServer

from .two_callers import FirstCall, GatedFront, SharedOperation, paused_past_its_lease

PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR", "reference": "order-7"}
#: a server that keeps no refusal under a key: a 400 in front of it is a final answer
PROFILE = "ietf"


class InFront(GatedFront):
    """In front of the reference server: the first payment request is held until the
    test opens the gate, after the server paid it (its answer held), or, `late`, before
    it reaches the server (it pays once the gate opens, and its answer is then lost: a
    read timeout); the second one is refused here with a 400, never reaching the
    server; any later one goes through."""

    def __init__(self, server: ReferenceServer, *, late: bool = False) -> None:
        super().__init__(server)
        self.late = late

    def before(self, turn: int, request: httpx.Request) -> httpx.Response | None:
        if turn == 2:
            return httpx.Response(400, json={"error": "bad request"})
        if turn == 1 and self.late:
            self.hold()
        return None

    def after(self, turn: int, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if turn == 1:
            if self.late:
                raise httpx.ReadTimeout("timed out", request=request)
            self.hold()
        return response


def refused_then_late(
    tmp_path: Path, first: FirstCall, *, late: bool = False
) -> tuple[Any, Any, SharedOperation, ReferenceServer]:
    """A (run by `first`) pays and is held past its lease (`late`: before its request
    reaches the server); B takes over and is refused; then A goes on. What each was
    told (A: what it returned, or raised), the operation (its store), and the server."""
    server = ReferenceServer(profile=PROFILE)
    front = InFront(server, late=late)
    operation = SharedOperation(tmp_path / "s.db", PAYMENT, PROFILE)
    # A is paused (a GC pause, SIGSTOP) past its lease
    owner_a = paused_past_its_lease(lambda: first(operation, front), front.arrived, operation.clock)
    with operation.client(front) as b:
        told_b = operation.pay(b)
    front.gate.set()
    told_a = owner_a.join()
    if not late:
        assert owner_a.error is None, owner_a.error
    return told_a, told_b, operation, server


def late_success_wins(tmp_path: Path, first: FirstCall) -> tuple[SharedOperation, ReferenceServer]:
    """A's own 2xx comes after B stored a refusal (`refused_then_late`): what each was
    told, what the store keeps, what the server paid. The operation and the server."""
    told_a, told_b, operation, server = refused_then_late(tmp_path, first)
    # B stored the refusal first: it was told so, and that cannot be taken back.
    assert (told_b.state, told_b.status_code) == (State.FAILED, 400)
    # A is told its own success: its own answer, not B's refusal from the store.
    assert (told_a.state, told_a.status_code) == (State.SUCCEEDED, 201)
    assert not told_a.from_store
    # The store keeps the success, with A's answer; nothing holds the lease.
    record = operation.record()
    assert record is not None
    assert (record.state, record.lease_owner) == (State.SUCCEEDED, None)
    assert record.response is not None
    assert record.response.status_code == 201
    # The refusal stays in the record's evidence: another caller was told it.
    assert "another caller stored first, and was told: HTTP 400" in record.evidence
    assert len(server.ledger()) == 1  # paid once
    return operation, server


def test_a_paused_caller_s_own_late_success_wins_over_a_refusal_stored_meanwhile(
    tmp_path: Path,
) -> None:
    operation, server = late_success_wins(tmp_path, SharedOperation.paid_by_a_client)
    # Every later read says succeeded: the client's, a resume's, and the operator's.
    with operation.client(server.transport, clock=ManualClock()) as c:
        seen = c.operation("op")
        assert seen is not None
        assert seen.state is State.SUCCEEDED
        again = operation.pay(c)  # issued again: answered from the store, nothing sent
        assert (again.state, again.status_code, again.from_store) == (State.SUCCEEDED, 201, True)
    shown = CliRunner().invoke(main, ["ops", "show", "op", "--store", str(tmp_path / "s.db")])
    assert shown.exit_code == 0, shown.output
    assert "succeeded" in shown.output
    assert "failed" not in shown.output
    listed = CliRunner().invoke(main, ["ops", "list", "--store", str(tmp_path / "s.db")])
    assert listed.exit_code == 0, listed.output
    assert "succeeded" in listed.output
    assert len(server.ledger()) == 1


def test_an_async_paused_caller_s_own_late_success_wins_over_a_refusal_stored_meanwhile(
    tmp_path: Path,
) -> None:
    # The async client's final write may go behind the answer (`_behind`): past its
    # lease it is awaited, and it is this caller's success that lands.
    late_success_wins(tmp_path, SharedOperation.paid_by_an_async_client)


def test_a_paused_caller_s_own_late_attempt_unsettles_a_refusal_stored_meanwhile(
    tmp_path: Path, first_caller: FirstCall
) -> None:
    # A is paused before its request leaves; B takes over and stores a refusal; then
    # A's request reaches the server, which pays, and its answer is lost. A's attempt
    # may have been applied after the refusal was stored: A is told so (indeterminate,
    # never "failed"), the store no longer keeps the refusal as the operation's answer,
    # and a resume under the key settles it as the payment the server made, once.
    told_a, told_b, operation, server = refused_then_late(tmp_path, first_caller, late=True)
    assert (told_b.state, told_b.status_code) == (State.FAILED, 400)
    assert isinstance(told_a, Indeterminate), told_a
    record = operation.left_unsettled()
    assert "no longer settled" in record.evidence
    assert len(server.ledger()) == 1
    operation.resumed_as_one_payment(server)  # the server replayed its payment: paid once
