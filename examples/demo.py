"""`make demo`: a payroll batch, faults, a killed submitter, and the proof.

1. Start the reference server (`idemclient server`) on a free 127.0.0.1 port.
2. Inject faults into the payouts of some rows (matched by each row's key): 503 and
   429 with Retry-After (seconds, milliseconds, HTTP-date), apply-then-drop, responses
   slower than the client's timeout; an external system timing out and one refusing
   connections.
3. Submit examples/payroll.csv (300 payouts) with `idemclient batch submit` (which
   first looks every row up on the server: none is there yet), and kill the submitter
   (SIGKILL) part way.
4. Run the same command again until it exits 0.
5. Print the report's summary and check the server's ledger: every row applied
   exactly once at both external systems.

Everything runs for real: separate processes, a real socket, real signals. Its files
(the report, the store, the server's database) stay where it says at the end, for you
to open: in a new directory under the system's temporary one, or in the directory
given as its argument (`python examples/demo.py DIR`).
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from idemclient import key_from_identity
from idemclient.testing import SandboxClient, spawn

HERE = Path(__file__).parent
PAYROLL = HERE / "payroll.csv"
TOKEN = "demo-payroll-ops"


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main(argv: list[str]) -> int:
    rows = sum(1 for _ in csv.DictReader(PAYROLL.open()))
    # Kept: the report the command says it wrote is there to be read afterwards.
    work = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="idemclient-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    batch_file = work / "payroll-2026-11.csv"
    batch_file.write_bytes(PAYROLL.read_bytes())
    say("starting the reference server")
    with spawn(db=work / "psp.sqlite3", recovery_interval=1.0) as server:
        print(f"listening on {server.url}")
        with SandboxClient(server.url) as sandbox:
            inject_faults(sandbox)
            command = [
                sys.executable, "-m", "idemclient", "batch", "submit", str(batch_file),
                "--url", server.url, "--token", TOKEN,
                "--store", str(work / "batches.db"),
                "--report", str(work / "report.csv"),
                "--timeout", "1", "--concurrency", "8",
            ]  # fmt: skip
            say(f"submitting {rows} payouts, to be killed part way")
            killed_at = run_and_kill(command, sandbox, after=rows // 3)
            # The killed submitter's progress line never got its newline.
            print(f"\nSIGKILL sent with {killed_at} payouts applied on the server")
            code = 3
            for run in range(1, 6):
                say(f"running the same command again (run {run})")
                code = subprocess.run(command, check=False).returncode
                print(f"exit code {code}")
                if code == 0:
                    break
            ok = check(sandbox.ledger(), rows, work / "report.csv")
    report = work / "report.csv"
    print(f"\nthe report stays at {report}, the store and the server's database beside it")
    return 0 if ok and code == 0 else 1


def inject_faults(sandbox: SandboxClient) -> None:
    say("injecting faults")
    # Matched by key, so that they meet the payouts themselves, not the look-ups.
    keys = iter(key_from_identity(line["ref"], "payout") for line in csv.DictReader(PAYROLL.open()))
    faults: list[tuple[str, Callable[[str], None]]] = [
        ("503 (Retry-After: 1)", lambda k: sandbox.answer(503, key=k, retry_after=1)),
        ("429 (retry-after-ms: 300)", lambda k: sandbox.answer(429, key=k, retry_after_ms=300)),
        ("503 (HTTP-date)", lambda k: sandbox.answer(503, key=k, retry_after_date_in=1)),
        ("apply-then-drop", lambda k: sandbox.drop(key=k)),
        ("1.5 s answer (the client gives up after 1 s)", lambda k: sandbox.delay(1.5, key=k)),
    ]
    for name, inject in faults:
        for _ in range(3):
            for _ in range(7):  # every eighth row
                next(keys)
            inject(next(keys))
        print(f"{name}: 3 rows")
    sandbox.external_fault(2, "timeout", times=2)
    sandbox.external_fault(1, "down", times=1)
    print("external system 2 times out twice, external system 1 refuses once")


def run_and_kill(argv: list[str], sandbox: SandboxClient, *, after: int) -> int:
    process = subprocess.Popen(argv)
    deadline = time.monotonic() + 60
    applied = 0
    while time.monotonic() < deadline and process.poll() is None:
        applied = len(sandbox.ledger())
        if applied >= after:
            process.kill()
            break
        time.sleep(0.02)  # a demo watching a real process: poll gently
    process.wait(timeout=30)
    return applied


def check(ledger: list, rows: int, report_path: Path) -> bool:  # type: ignore[type-arg]
    say("the server's ledger")
    per_reference = Counter(entry.reference for entry in ledger)
    once = sum(1 for e in ledger if (e.ext1_applied, e.ext2_applied) == (1, 1))
    twice = [ref for ref, n in per_reference.items() if n > 1]
    with report_path.open() as f:
        report = list(csv.DictReader(f))
    states = Counter(line["state"] for line in report)
    print(f"payouts on the server: {len(ledger)} for {rows} rows")
    print(f"applied exactly once at both external systems: {once}")
    print(f"references paid more than once: {len(twice)}")
    print(f"report: {dict(states)}")
    ok = len(ledger) == rows == once == len(per_reference) and not twice
    ok = ok and states == Counter({"succeeded": rows})
    print("\nEVERY ROW APPLIED EXACTLY ONCE" if ok else "\nCHECK FAILED")
    return ok


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
