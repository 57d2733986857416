"""A refusal judged without knowing that the operation may have been applied settles
nothing.

The history (found by the deep checker, ietf, seed 4062494472): caller A takes the
operation and is paused (a GC pause, SIGSTOP) before its request leaves, past its
lease. Caller B takes the operation over; B's request reaches the server, which pays,
and its answer is lost on the way back; nothing of B's later attempts reaches the
server, and B stops, maybe applied. Then A goes on: its request, under the same key,
is refused in front of the server (a 403 from its edge: the server never saw it). A
read the row before B's attempt was noted, so it judged the 403 as the first answer to
a fresh operation, a final refusal, and wrote it over B's "maybe applied": the caller
was told "failed" and the store kept `failed` for a payment the server made.

A refusal written over an operation that may have been applied, by a caller that did
not know that, does not land: the caller judges it again as any refusal after an
attempt that may have been applied (an edge's 403 is never the server's stored
answer), and is told `Indeterminate`. The store keeps the operation indeterminate, and
a resume under its key settles it as the one payment made.

Through the public clients, against the reference server in-process (its ledger
counted), with a transport in front of it that holds A's request, loses B's answer and
refuses A's; the clock is a `ManualClock`, and every wait on a gate is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from idemclient import Indeterminate
from idemclient.testing import ReferenceServer

from .two_callers import FirstCall, GatedFront, SharedOperation, paused_past_its_lease, told

PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR", "reference": "order-9"}
PROFILE = "ietf"


class InFront(GatedFront):
    """In front of the reference server: the first payment request (A's) is held until
    the test opens the gate, then refused here with a 403 (the edge's, for a key the
    server holds); the second (B's) reaches the server, which pays, and its answer is
    lost (a read timeout); the others fail to connect while the gate is shut, and go
    through once it is open."""

    def before(self, turn: int, request: httpx.Request) -> httpx.Response | None:
        if turn == 1:
            self.hold()
            return httpx.Response(403, json={"title": "Forbidden", "detail": "refused at the edge"})
        if turn > 2 and not self.gate.is_set():
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return None

    def after(self, turn: int, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if turn == 2:
            raise httpx.ReadTimeout("timed out", request=request)
        return response


def test_an_edge_refusal_after_a_takeover_s_maybe_applied_attempt_is_never_told_failed(
    tmp_path: Path, first_caller: FirstCall
) -> None:
    server = ReferenceServer(profile=PROFILE)
    front = InFront(server)
    operation = SharedOperation(tmp_path / "s.db", PAYMENT, PROFILE)
    # A paused past its lease
    owner_a = paused_past_its_lease(
        lambda: first_caller(operation, front), front.arrived, operation.clock
    )
    with operation.client(front) as b:
        told_b = told(lambda: operation.pay(b))
    # B's request paid, its answer lost, nothing after it reached the server.
    assert isinstance(told_b, Indeterminate), told_b
    assert [e.status for e in server.ledger()] == ["succeeded"]
    front.gate.set()
    told_a = owner_a.join()
    # A's 403 came from the edge after B's attempt, which may have been applied: not
    # the operation's refusal. A is told so, never "failed".
    assert isinstance(told_a, Indeterminate), told_a
    assert told_a.outcome.maybe_applied
    assert "403" in told_a.outcome.evidence
    record = operation.left_unsettled()
    # Resumed under its key: the server replays the payment it made, once.
    operation.resumed_as_one_payment(server)
    assert server.ledger()[0].idempotency_key == record.key
