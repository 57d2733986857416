"""Attacks on the state table's newest rules: a final success wins over a refusal
stored first, and an attempt of a caller whose lease was taken over unsettles one.

Through the public client, against the reference server in-process (its ledger
counted), with a transport in front that refuses the second caller's request before it
reaches the server (a server that keeps no refusal under the key: `ietf`); the clock is
a `ManualClock`, and every wait on a gate is bounded.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient.hooks import AttemptEndEvent, Hooks
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

BOUND = 10.0  # a bound on a test gone wrong, never a wait the test relies on
PAYMENT: dict[str, Any] = {"amount": 1999, "currency": "EUR", "reference": "order-9"}
PROFILE = "ietf"


class LostThenRefused(httpx.BaseTransport):
    """The first payment request reaches the server, which pays; its answer is lost (a
    read timeout). The second is refused here with a 400, never reaching the server."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.posts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts += 1
            if self.posts == 2:
                return httpx.Response(400, json={"error": "bad request"})
            if self.posts == 1:
                self.inner.handle_request(request).read()
                raise httpx.ReadTimeout("timed out", request=request)
        return self.inner.handle_request(request)


def client(transport: httpx.BaseTransport, store: Path, clock: ManualClock, **kw: Any) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        server_clock=False,
        profile=PROFILE,
        **kw,
    )


def test_an_answer_lost_before_a_refusal_stored_meanwhile_is_never_told_failed(
    tmp_path: Path,
) -> None:
    # A's request reaches the server, which pays; A's answer is lost (a read timeout),
    # and A is paused (a GC pause, SIGSTOP; here: its own attempt hook) after it read
    # that, before it writes it, past its lease. B takes the operation over and is
    # refused in front of the server; B stores the refusal. Then A goes on. A's attempt
    # may have been applied, and was: it must not be told "failed", and the store must
    # not keep the refusal as the operation's answer for a payment the server made.
    server = ReferenceServer(profile=PROFILE)
    front = LostThenRefused(server)
    clock = ManualClock()
    store = tmp_path / "s.db"
    paused, gate = threading.Event(), threading.Event()

    def pause(event: AttemptEndEvent) -> None:
        if event.status is None:  # A's lost answer, read
            paused.set()
            assert gate.wait(BOUND), "the test never opened the gate"

    told: dict[str, object] = {}

    def run_a() -> None:
        with client(front, store, clock, hooks=Hooks(on_attempt_end=pause)) as a:
            try:
                told["a"] = a.post("/v1/payments", json=PAYMENT, operation_id="op")
            except BaseException as exc:  # what A is told
                told["a"] = exc

    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    assert paused.wait(BOUND)
    policy = RetryPolicy()
    clock.advance(policy.deadline + policy.attempt_timeout + 11)  # past A's lease
    with client(front, store, clock) as b:
        told_b = b.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert (told_b.state, told_b.status_code) == (State.FAILED, 400)
    gate.set()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert len(server.ledger()) == 1  # the server paid A's request
    told_a = told["a"]
    assert isinstance(told_a, Indeterminate), told_a
    record = SQLiteStore(store).get("op")
    assert record is not None
    assert record.state is State.INDETERMINATE, (record.state, record.evidence)
    with client(server.transport, store, clock) as c:
        (resumed,) = c.resume()
    assert (resumed.state, resumed.status_code) == (State.SUCCEEDED, 201)
    assert len(server.ledger()) == 1


class RefusedThenLost(httpx.BaseTransport):
    """The first payment request reaches the server, which refuses it; its answer is
    held until the test opens the gate. Every later one is lost (a read timeout)."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.posts = 0
        self.arrived = threading.Event()
        self.gate = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts += 1
            if self.posts > 1:
                raise httpx.ReadTimeout("timed out", request=request)
            response = self.inner.handle_request(request)
            response.read()
            self.arrived.set()
            assert self.gate.wait(BOUND), "the test never opened the gate"
            return response
        return self.inner.handle_request(request)


def test_a_paused_caller_s_refusal_written_over_a_takeover_tells_what_the_store_keeps(
    tmp_path: Path,
) -> None:
    # A's request is refused by the server, and A is paused past its lease before it
    # writes that. B takes the operation over, its attempt lost (maybe applied), and
    # stops indeterminate. A's refusal answered a request sent before B's attempt: it
    # says nothing of what B's did (a server that refused without admitting binds
    # nothing to the key), so it settles nothing: the store keeps the operation
    # indeterminate, maybe applied, and A must be told what the store keeps, never a
    # refusal "never applied" built from what A knew before its lease lapsed.
    server = ReferenceServer(profile=PROFILE)
    front = RefusedThenLost(server)
    clock = ManualClock()
    store = tmp_path / "s.db"
    refused = {"amount": -5, "currency": "EUR", "reference": "order-10"}
    told: dict[str, object] = {}

    def run_a() -> None:
        with client(front, store, clock) as a:
            try:
                told["a"] = a.post("/v1/payments", json=refused, operation_id="op")
            except Indeterminate as error:
                told["a"] = error

    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    assert front.arrived.wait(BOUND)
    policy = RetryPolicy()
    clock.advance(policy.deadline + policy.attempt_timeout + 11)  # past A's lease
    b = client(front, store, clock, policy=RetryPolicy(max_attempts=1))
    with b, pytest.raises(Indeterminate):
        b.post("/v1/payments", json=refused, operation_id="op")
    front.gate.set()
    thread.join(BOUND)
    assert not thread.is_alive()
    record = SQLiteStore(store).get("op")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
    told_a = told["a"]
    assert isinstance(told_a, Indeterminate), told_a
    assert told_a.outcome.state is record.state
    assert told_a.outcome.maybe_applied is record.maybe_applied
