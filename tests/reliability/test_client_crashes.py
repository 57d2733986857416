"""The client process SIGKILLed at every point of an operation's life, in randomized
trials against a live reference server; then restarted: `resume()`, and the
application issues its operations again. Exactly one effect for every operation, none
lost, and every key the one that was first recorded.

Each trial is one child process running several operations at once (so the others
die wherever they happen to be), with random faults scripted on the server and a
random kill point for one of them. Kill points are reached through hooks and a
sabotaging transport, never by waiting. The seed is printed; `IDEMCLIENT_SEED`
reproduces every trial's plan (the interleaving of parallel trials may differ).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from idemclient import Client, OutcomeError, RetryPolicy, State
from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, FastClock, exactly_once, payment

CHILD = Path(__file__).with_name("crash_client.py")
POINTS = ("after-intent", "during-send", "after-apply", "after-outcome")
TRIALS = 60  # 15 per kill point
PARALLEL = 2  # trials at once: one per core


@pytest.fixture
def live() -> Iterator[LiveServer]:
    # Real time on the server: the children are other processes on the real clock.
    with ReferenceServer(clock=SystemClock()) as server, serve(server) as running:
        yield running


@dataclass
class Trial:
    number: int
    point: str
    plan: dict[str, Any]
    faults: list[str]

    @property
    def doomed(self) -> dict[str, Any]:
        operations: list[dict[str, Any]] = self.plan["operations"]
        return operations[self.plan["doomed"]]


def plan_trial(number: int, point: str, rng: random.Random, live: LiveServer, work: Path) -> Trial:
    count = rng.randint(2, 6)
    operations = [
        {"id": f"t{number}-op{n}", "body": payment(f"t{number}-ref{n}", rng)} for n in range(count)
    ]
    plan = {
        "url": live.url,
        "store": str(work / f"trial-{number}.db"),
        "token": f"trial-{number}",
        "operations": operations,
        "doomed": rng.randrange(count),
        "point": point,
        # during-send: how much of the body is on the wire when the client dies
        "cut": rng.choice([0.0, rng.random(), 1.0]),
    }
    return Trial(number, point, plan, script_faults(rng, live.server))


def script_faults(rng: random.Random, server: ReferenceServer) -> list[str]:
    """Up to three random retryable faults, for whichever requests come next."""
    faults = []
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(
            ["503-s", "429-ms", "503-date", "drop", "ext-timeout", "ext-down", "ext-applied"]
        )
        if kind == "503-s":
            server.answer(503, path=PATH, retry_after=rng.choice([1, 2]))
        elif kind == "429-ms":
            server.answer(429, path=PATH, retry_after_ms=rng.randrange(10, 800))
        elif kind == "503-date":
            server.answer(503, path=PATH, retry_after_date_in=1)
        elif kind == "drop":
            server.drop(path=PATH)  # applied, then the answer is lost
        elif kind == "ext-timeout":
            server.external_fault(rng.choice([1, 2]), "timeout", times=rng.choice([1, 2]))
        elif kind == "ext-down":
            server.external_fault(rng.choice([1, 2]), "down")
        else:
            server.external_fault(rng.choice([1, 2]), "apply_then_timeout", times=2)
        faults.append(kind)
    return faults


def restart(trial: Trial, live: LiveServer) -> Counter[str]:
    """What the store holds after the kill, then resume and issue everything again."""
    store = Path(trial.plan["store"])
    found: Counter[str] = Counter()
    doomed_reference = trial.doomed["body"]["reference"]
    applied_before = {e.reference for e in live.server.ledger() if e.client == trial.plan["token"]}
    with Client(
        store=store,
        base_url=live.url,
        headers={"Authorization": f"Bearer {trial.plan['token']}"},
        clock=FastClock(),
        policy=RetryPolicy(max_attempts=10),
    ) as client:
        records = {r.operation_id: r for r in client.store.operations()}
        for operation in trial.plan["operations"]:
            record = records.get(operation["id"])
            found[f"at_restart_{record.state.value if record else 'not_recorded'}"] += 1
        doomed = records.get(trial.doomed["id"])
        assert doomed is not None, "the doomed operation's intent was committed first"
        if trial.point == "after-outcome":
            assert doomed.state is State.SUCCEEDED
            assert doomed_reference in applied_before
        else:
            assert doomed.state is State.IN_FLIGHT  # its owner died holding the lease
        if trial.point == "after-apply":
            assert doomed_reference in applied_before  # applied, answer never recorded
        if trial.point == "after-intent" or (
            trial.point == "during-send" and trial.plan["cut"] < 1
        ):
            assert doomed_reference not in applied_before  # never (wholly) sent
        if trial.point == "during-send":
            cut = "whole" if trial.plan["cut"] == 1 else "part"
            found[f"during_send_{cut}_of_the_body_sent"] += 1
        # The restarted application: resume what is unfinished, then issue every
        # operation again, as it would from its own records, until all are settled
        # (faults of parallel trials may hit these requests too). Bounded by time.
        resumed = client.resume()
        found["resumed_by_resume"] += len(resumed)
        deadline = time.monotonic() + 60
        pending = list(trial.plan["operations"])
        while pending:
            assert time.monotonic() < deadline, f"unsettled after restart: {pending}"
            operation = pending.pop(0)
            try:
                outcome = client.post(PATH, json=operation["body"], operation_id=operation["id"])
            except OutcomeError:
                pending.append(operation)
                continue
            assert outcome.state is State.SUCCEEDED
            record = records.get(operation["id"])
            if record is not None:
                assert outcome.key == record.key  # the key recorded before the crash
        keys = {r.operation_id: r.key for r in client.store.operations()}
    entries = [e for e in live.server.ledger() if e.client == trial.plan["token"]]
    by_reference = {e.reference: e for e in entries}
    assert len(entries) == len(trial.plan["operations"])  # none lost, none doubled
    for operation in trial.plan["operations"]:
        entry = by_reference[operation["body"]["reference"]]
        assert exactly_once(entry), entry
        assert entry.idempotency_key == keys[operation["id"]]
        assert entry.amount == operation["body"]["amount"]
    return found


def run_trial(trial: Trial, live: LiveServer, work: Path) -> Counter[str]:
    err = work / f"trial-{trial.number}.err"
    with err.open("wb") as stderr:
        done = subprocess.run(
            [sys.executable, str(CHILD), json.dumps(trial.plan)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            timeout=120,
            check=False,
        )
    assert done.returncode == -9, (trial, err.read_text())
    return restart(trial, live)


def test_a_client_killed_at_every_point_loses_nothing_and_doubles_nothing(
    live: LiveServer, tmp_path: Path, seed: int, figures: Figures
) -> None:
    rng = random.Random(seed)
    points = [POINTS[n % len(POINTS)] for n in range(TRIALS)]
    rng.shuffle(points)
    lock = threading.Lock()
    totals: Counter[str] = Counter()
    faults: Counter[str] = Counter()

    def one(number: int) -> None:
        trial_rng = random.Random(f"{seed}-{number}")
        with lock:  # scripting is sequential so that each trial's faults are its own draw
            trial = plan_trial(number, points[number], trial_rng, live, tmp_path)
        try:
            found = run_trial(trial, live, tmp_path)
        except BaseException as exc:
            exc.add_note(f"trial {number} of seed {seed}: {trial.point}, faults {trial.faults}")
            raise
        with lock:
            totals.update(found)
            totals["operations"] += len(trial.plan["operations"])
            totals[f"killed_{trial.point.replace('-', '_')}"] += 1
            faults.update(trial.faults)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for future in [pool.submit(one, n) for n in range(TRIALS)]:
            future.result(timeout=300)

    ledger = [e for e in live.server.ledger() if e.client.startswith("trial-")]
    assert len(ledger) == totals["operations"]
    assert all(exactly_once(entry) for entry in ledger)
    assert all(
        totals[f"killed_{point.replace('-', '_')}"] == TRIALS // len(POINTS) for point in POINTS
    )
    figures.count(
        "client crashes",
        trials=TRIALS,
        sigkills=TRIALS,
        effects=len(ledger),
        faults_scripted=sum(faults.values()),
        request_faults_left_unused=live.server.pending_faults(),
        **dict(sorted(totals.items())),
        **{f"fault_{key.replace('-', '_')}": value for key, value in sorted(faults.items())},
    )
