"""The real server process SIGKILLed after every phase of a payment, then restarted on
the same database file: the recovery worker, or the client's retry, finishes it with
exactly one effect at each external system (seed diagrams 3 and 4).

A request reaches each point of its life and is held there, in a live process:

- after each phase (ADMITTED .. EXT2_DONE): the `crash` fault abandons the request
  right after that phase committed, its lease still held, as a dying worker leaves it;
- in the middle of an external call: a server process whose next call to external
  system 1 or 2 waits at a gate (`gated_server.py`): EXTn_SENT committed, the call out;
- parked (diagram 3): both the call to external system 2 and the probe time out, the
  answer is 202, the lease released;
- the response held (a `delay` fault): everything committed, the answer not yet sent;

and then the whole process is SIGKILLed and `idemclient server` started again on the
same file and port. Leases are expired with the sandbox clock, never by waiting. Two
chains run side by side, each process the heir of one crash and the victim of the
next: one finished by the background recovery worker, one by `Client.resume()`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from idemclient import Client, Indeterminate, RetryPolicy, State
from idemclient.testing import LedgerEntry, ReferenceServer, SandboxClient, spawn
from tests.support.ports import free_port

from .conftest import Figures
from .support import PATH, ChildLines, FastClock, exactly_once, payment

GATED = Path(__file__).with_name("gated_server.py")
LEASE = 30.0  # the server's default; expired by moving its clock, never by waiting


@dataclass(frozen=True)
class Scenario:
    name: str
    #: what the key row says after the kill: recovery point, and whether finished
    point: str | None
    finished: bool = False
    #: effects at (E1, E2) already made when the process died
    applied: tuple[int, int] = (0, 0)


CRASHES = [
    Scenario("crash-ADMITTED", None),
    Scenario("crash-H1_DONE", "H1_DONE"),
    Scenario("crash-EXT1_SENT", "EXT1_SENT"),
    Scenario("crash-EXT1_CALLED", "EXT1_SENT", applied=(1, 0)),  # E1 applied, not recorded
    Scenario("crash-EXT1_DONE", "EXT1_DONE", applied=(1, 0)),
    Scenario("crash-H2_DONE", "H2_DONE", applied=(1, 0)),
    Scenario("crash-EXT2_SENT", "EXT2_SENT", applied=(1, 0)),
    Scenario("crash-EXT2_CALLED", "EXT2_SENT", applied=(1, 1)),  # E2 applied, not recorded
    Scenario("crash-EXT2_DONE", "EXT2_DONE", applied=(1, 1)),
    Scenario("held-in-call-to-E1", "EXT1_SENT"),
    Scenario("held-in-call-to-E2", "EXT2_SENT", applied=(1, 0)),
    Scenario("parked-202", "EXT2_SENT", applied=(1, 0)),
    Scenario("response-held", "EXT2_DONE", finished=True, applied=(1, 1)),
]


class Incarnation:
    """One server process on the chain's database file and port."""

    def __init__(self, chain: Chain, *, gated: int | None = None) -> None:
        self.chain = chain
        self.url = f"http://127.0.0.1:{chain.port}"
        self._spawned: AbstractContextManager[Any] | None = None
        if gated is None:
            self._spawned = spawn(
                db=chain.db,
                port=chain.port,
                recovery_interval=0.05 if chain.finisher == "worker" else 0,
            )
            self.process: subprocess.Popen[Any] = self._spawned.__enter__().process
            self.lines: ChildLines | None = None
        else:
            self.process = subprocess.Popen(
                [sys.executable, str(GATED), str(chain.db), str(chain.port), str(gated)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self.lines = ChildLines(self.process)
            assert self.lines.next(timeout=60) == "ready"
        self.sandbox = SandboxClient(self.url)
        chain.incarnations.append(self)

    def kill(self) -> None:
        if self.process.returncode is not None:
            return  # killed already
        self.sandbox.close()
        self.process.kill()  # SIGKILL: no shutdown, no cleanup, no final commit
        self.process.wait(timeout=30)
        if self._spawned is not None:
            self._spawned.__exit__(None, None, None)
        elif self.process.stdout is not None:
            self.process.stdout.close()
        assert self.process.returncode == -9


@dataclass
class Chain:
    finisher: str  # "worker" or "client"
    db: Path
    store: Path
    port: int
    #: how far every server clock so far was pushed: each heir goes a lease further
    offset: float = 0.0
    incarnations: list[Incarnation] = field(default_factory=list)

    def client(self, attempts: int) -> Client:
        return Client(
            store=self.store,
            base_url=f"http://127.0.0.1:{self.port}",
            headers={"Authorization": "Bearer merchant-1"},
            clock=FastClock(),
            policy=RetryPolicy(max_attempts=attempts),
        )


def bring_down(chain: Chain, victim: Incarnation | None, scenario: Scenario) -> str:
    """Start a payment, hold it at the scenario's point, and SIGKILL the process there."""
    key = f"{chain.finisher}-{scenario.name}"
    body = payment(f"ref-{key}")
    # A process of our own: held at a gate, or (parked) with no recovery worker that
    # would take the released request over before the kill.
    gated = {"held-in-call-to-E1": 1, "held-in-call-to-E2": 2, "parked-202": 0}.get(scenario.name)
    if gated is not None:
        if victim is not None:
            victim.kill()
        victim = Incarnation(chain, gated=gated)
    assert victim is not None
    control = victim.sandbox
    if scenario.name.startswith("crash-"):
        control.crash(scenario.name.removeprefix("crash-"), key=key)
    elif scenario.name == "parked-202":
        control.external_fault(2, "timeout", times=2)  # the call and its probe
    elif scenario.name == "response-held":
        control.delay(120, key=key)  # committed, then the answer waits

    def send() -> None:
        with chain.client(attempts=1) as client, pytest.raises(Indeterminate):
            client.post(PATH, json=body, key=key, operation_id=key)

    with ThreadPoolExecutor(max_workers=1) as pool:
        sent: Future[None] = pool.submit(send)
        if gated:
            assert victim.lines is not None
            assert victim.lines.next(timeout=60) == "held"  # in the middle of the call
        elif scenario.name == "response-held":
            wait_for(lambda: _state(control, key) == "finished", "the payment to commit")
        else:
            sent.result(timeout=60)  # the request was abandoned (or parked) at its point
        victim.kill()
        sent.result(timeout=60)  # the client saw the connection die: maybe applied
    return key


def _state(control: SandboxClient, key: str) -> str | None:
    record = control.key_record("merchant-1", key)
    return None if record is None else record.state


def wait_for(condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll a live server; each round is a request to it, so the loop never spins idle."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def check_the_dead_servers_file(chain: Chain, key: str, scenario: Scenario) -> None:
    """Read the file the killed process left: the row is where the scenario put it."""
    with ReferenceServer(db=chain.db) as offline:
        record = offline.key_record("merchant-1", key)
        entries = [e for e in offline.ledger() if e.idempotency_key == key]
    entry = entries[0] if entries else None
    assert len(entries) <= 1
    assert record is not None
    assert record.state == ("finished" if scenario.finished else "started")
    assert record.recovery_point == scenario.point
    if scenario.point is None:
        assert entry is None  # admitted, nothing else: not even a resource
    else:
        assert entry is not None
        assert (entry.ext1_applied, entry.ext2_applied) == scenario.applied


def finish(chain: Chain, heir: Incarnation, key: str, scenario: Scenario) -> LedgerEntry:
    # Every lease held by a dead process is now older than LEASE on the heir's clock.
    chain.offset += LEASE + 1
    heir.sandbox.advance(chain.offset)
    if chain.finisher == "worker" and not scenario.finished:
        wait_for(lambda: _state(heir.sandbox, key) == "finished", "the recovery worker")
    with chain.client(attempts=10) as client:
        [outcome] = client.resume()  # the operation the client saw die
    assert outcome.key == key
    assert outcome.state is State.SUCCEEDED
    # A worker that got there first, or a dead process that finished, leaves the client
    # a stored answer; otherwise the client's retry itself took the request over.
    assert outcome.replayed is (chain.finisher == "worker" or scenario.finished)
    [entry] = [e for e in heir.sandbox.ledger() if e.idempotency_key == key]
    return entry


def run_chain(finisher: str, work: Path) -> list[tuple[str, LedgerEntry]]:
    chain = Chain(finisher, work / f"psp-{finisher}.sqlite3", work / f"{finisher}.db", free_port())
    results = []
    try:
        victim = Incarnation(chain)
        for scenario in CRASHES:
            key = bring_down(chain, victim, scenario)
            check_the_dead_servers_file(chain, key, scenario)
            heir = Incarnation(chain)
            entry = finish(chain, heir, key, scenario)
            results.append((scenario.name, entry))
            victim = heir
    finally:
        for incarnation in chain.incarnations:  # none outlives the test, pass or fail
            incarnation.kill()
    return results


def test_a_server_killed_after_every_phase_finishes_each_payment_exactly_once(
    tmp_path: Path, figures: Figures
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        chains = {name: pool.submit(run_chain, name, tmp_path) for name in ("worker", "client")}
        results = {name: chain.result(timeout=300) for name, chain in chains.items()}
    for finisher, entries in results.items():
        assert [name for name, _ in entries] == [s.name for s in CRASHES]
        for name, entry in entries:
            assert exactly_once(entry), (finisher, name, entry)
            # Each system got the instruction once: a resumer probes by the derived key
            # before calling again, and finds what the dead process had sent.
            assert (entry.ext1_calls, entry.ext2_calls) == (1, 1), (finisher, name, entry)
    kills = sum(len(entries) for entries in results.values())
    figures.count(
        "server crashes",
        sigkills=kills,
        restarts=kills,
        points=len(CRASHES),
        finished_by_the_recovery_worker=len(results["worker"]),
        finished_by_a_client_retry=len(results["client"]),
        effects=kills,
        effects_per_external_system=1,
    )
