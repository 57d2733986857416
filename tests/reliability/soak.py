"""`make soak`: real-process trials against `idemclient server` on loopback, each with
random faults and a SIGKILL of the client (and, in a share of trials, of a server),
then a restart that resumes. Ends with one table.

    python -m tests.reliability.soak --trials 1000 [--backends sqlite,postgres] [--seed N]

SQLite: one server on a database file. PostgreSQL: two servers sharing one database
(each trial's client talks to one of them, at random; both run recovery sweeps on the
shared database), in a cluster started for the
run (tests/support/pgcluster.py). Each trial is `crash_client.py` (the kill trials of
tests/reliability/test_client_crashes.py): several operations at once, one of them
SIGKILLed at a random point; a server killed mid-trial is started again on the same
database and port. The restart resumes, issues every operation again until each is
settled, and the ledger is checked: duplicates, lost payments and wrong outcome classes
must all be 0. Exit status 1 if any is not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

from idemclient import Client, OutcomeError, RetryPolicy, State
from idemclient.testing import SandboxClient
from idemclient.testing._adapters.live import _read_ready_line, server_command
from tests.support.ports import free_port

from .support import PATH, FastClock, exactly_once, payment

CHILD = Path(__file__).with_name("crash_client.py")
POINTS = ("after-intent", "during-send", "after-apply", "after-outcome")
LEASE = 2.0  # short, so that work a killed server left is taken over within the trial
SETTLE_WITHIN = 60.0  # seconds of real time a restart may take to settle every operation


class Server:
    """One `idemclient server` process on a fixed port, that can be SIGKILLed and
    started again on the same database."""

    def __init__(self, db: str, work: Path, name: str) -> None:
        self.db = db
        self.port = free_port()  # the same port across kills
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (work / f"{name}.log").open("a")
        self.process: subprocess.Popen[str] | None = None
        self.kills = 0
        self.start()

    def start(self) -> None:
        argv = server_command(
            port=self.port, db=self.db, lease=LEASE, recovery_interval=0.5, log_level="error"
        )
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        _read_ready_line(self.process, 30.0)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.kills += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.log.close()


def script_faults(rng: random.Random, sandbox: SandboxClient) -> list[str]:
    faults = []
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(
            ["503-s", "429-ms", "503-date", "drop", "ext-timeout", "ext-down", "ext-applied"]
        )
        if kind == "503-s":
            sandbox.answer(503, path=PATH, retry_after=1)
        elif kind == "429-ms":
            sandbox.answer(429, path=PATH, retry_after_ms=rng.randrange(10, 800))
        elif kind == "503-date":
            sandbox.answer(503, path=PATH, retry_after_date_in=1)
        elif kind == "drop":
            sandbox.drop(path=PATH)
        elif kind == "ext-timeout":
            sandbox.external_fault(rng.choice([1, 2]), "timeout", times=rng.choice([1, 2]))
        elif kind == "ext-down":
            sandbox.external_fault(rng.choice([1, 2]), "down")
        else:
            sandbox.external_fault(rng.choice([1, 2]), "apply_then_timeout", times=2)
        faults.append(kind)
    return faults


def settle(plan: dict[str, Any], url: str) -> dict[str, Any]:
    """The restart: resume, then issue every operation again, until each is settled."""
    outcomes: dict[str, Any] = {}
    deadline = time.monotonic() + SETTLE_WITHIN
    with Client(
        store=plan["store"],
        base_url=url,
        headers={"Authorization": f"Bearer {plan['token']}"},
        clock=FastClock(),
        policy=RetryPolicy(max_attempts=10, attempt_timeout=10.0),
    ) as client:
        first_keys = {r.operation_id: r.key for r in client.store.operations()}
        while True:
            with suppress(OutcomeError):
                client.resume()
            pending = []
            for operation in plan["operations"]:
                try:
                    outcome = client.post(
                        PATH, json=operation["body"], operation_id=operation["id"]
                    )
                    outcomes[operation["id"]] = outcome
                except OutcomeError:
                    pending.append(operation["id"])
            if not pending or time.monotonic() > deadline:
                break
            # A real wait, not an injected clock: the server is another process on the
            # real clock, and its lease must lapse in real time before a retry.
            time.sleep(0.5)  # a real wait is needed: the server process leases on the real clock
        keys = {r.operation_id: r.key for r in client.store.operations()}
    return {"outcomes": outcomes, "pending": pending, "first_keys": first_keys, "keys": keys}


def run_trials(
    backend: str,
    servers: list[Server],
    trials: int,
    rng: random.Random,
    work: Path,
    stop_at: float,
) -> Counter[str]:
    counts: Counter[str] = Counter()
    for number in range(trials):
        if time.monotonic() > stop_at:
            print(f"  {backend}: out of time after {number} trials", flush=True)
            break
        counts["trials"] += 1
        trial_rng = random.Random(rng.randrange(2**64))
        # An operation stays bound to the server it was first sent to; the other
        # server on the same database sweeps up what a killed one left.
        talk = restart_at = trial_rng.choice(servers)
        count = trial_rng.randint(2, 6)
        token = f"soak-{backend}-{number}-{trial_rng.randrange(10**9)}"
        plan = {
            "url": talk.url,
            "store": str(work / f"{backend}-{number}.db"),
            "token": token,
            "operations": [
                {"id": f"op{n}", "body": payment(f"{token}-ref{n}", trial_rng)}
                for n in range(count)
            ],
            "doomed": trial_rng.randrange(count),
            "point": trial_rng.choice(POINTS),
            "cut": trial_rng.choice([0.0, trial_rng.random(), 1.0]),
        }
        counts["operations"] += count
        with SandboxClient(talk.url) as sandbox:
            counts["faults"] += len(script_faults(trial_rng, sandbox))
        victim = trial_rng.choice(servers) if trial_rng.random() < 0.15 else None
        killer = None
        if victim is not None:
            delay = trial_rng.uniform(0.0, 0.4)

            def kill_and_restart(server: Server = victim, wait: float = delay) -> None:
                # Real time: the server is another process on the real clock, and the
                # kill must land at a random moment of the client's real run.
                time.sleep(wait)  # a real wait is needed: the kill lands mid-run in real time
                server.kill()
                server.start()

            killer = threading.Thread(target=kill_and_restart)
            killer.start()
        done = subprocess.run(
            [sys.executable, str(CHILD), json.dumps(plan)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=180,
            check=False,
        )
        if killer is not None:
            killer.join(timeout=60)
            counts["server kills"] += 1
        counts["client kills"] += done.returncode == -signal.SIGKILL
        result = settle(plan, restart_at.url)
        with SandboxClient(restart_at.url) as sandbox:
            entries = [e for e in sandbox.ledger() if e.client == token]
        by_reference: dict[str, list[Any]] = {}
        for entry in entries:
            by_reference.setdefault(entry.reference, []).append(entry)
        for operation in plan["operations"]:
            found = by_reference.get(operation["body"]["reference"], [])
            outcome = result["outcomes"].get(operation["id"])
            counts["effects"] += sum(e.ext1_applied for e in found)
            if len(found) > 1:
                counts["duplicates"] += len(found) - 1
            if not found or not exactly_once(found[0]):
                counts["lost"] += 1
            if outcome is None or outcome.state is not State.SUCCEEDED:
                counts["wrong outcome"] += 1
            first = result["first_keys"].get(operation["id"])
            if first is not None and result["keys"].get(operation["id"]) != first:
                counts["key changed"] += 1
        if (number + 1) % 50 == 0:
            print(f"  {backend}: {number + 1} trials, {dict(counts)}", flush=True)
    return counts


@contextmanager
def servers_for(backend: str, work: Path) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        if backend == "sqlite":
            db = str(work / "server.db")
            servers = [Server(db, work, "sqlite-server")]
        else:
            from tests.support.pgcluster import Cluster

            cluster = Cluster()
            stack.callback(cluster.stop)
            cluster.start()
            url = cluster.create_database("soak")
            servers = [Server(url, work, "pg-server-a"), Server(url, work, "pg-server-b")]
        for server in servers:
            stack.callback(server.stop)
        yield servers


COLUMNS = (
    "trials",
    "client kills",
    "server kills",
    "operations",
    "faults",
    "effects",
    "duplicates",
    "lost",
    "wrong outcome",
    "key changed",
)


def table(results: dict[str, Counter[str]]) -> str:
    lines = [
        "| backend | " + " | ".join(COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    total: Counter[str] = Counter()
    for backend, counts in results.items():
        total.update(counts)
        lines.append(f"| {backend} | " + " | ".join(str(counts[c]) for c in COLUMNS) + " |")
    if len(results) > 1:
        lines.append("| all | " + " | ".join(str(total[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak")
    parser.add_argument("--trials", type=int, default=1000, help="per backend")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--minutes", type=float, default=None, help="per backend: start no trial after it"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"soak: seed={seed}, {args.trials} trials per backend ({args.backends})", flush=True)
    rng = random.Random(seed)
    results: dict[str, Counter[str]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="idemclient-soak-") as tmp:
        for backend in args.backends.split(","):
            work = Path(tmp) / backend
            work.mkdir()
            stop_at = float("inf") if args.minutes is None else time.monotonic() + args.minutes * 60
            with servers_for(backend, work) as servers:
                results[backend] = run_trials(backend, servers, args.trials, rng, work, stop_at)
    print(f"soak: seed={seed}, {time.monotonic() - started:.0f} s")
    print(table(results))
    bad = sum(c["duplicates"] + c["lost"] + c["wrong outcome"] for c in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
