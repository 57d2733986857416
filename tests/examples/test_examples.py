"""Every example runs, as a user would run it, and says what it promises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..cli.test_progress import run_in_terminal

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"

EXPECTED = {
    "quickstart.py": [r"^succeeded pay_[0-9a-f]+$"],
    "asgi_checkout.py": [
        r"answers: 200 200",
        r"same payment: True",
        r"charges on the PSP: 1$",
    ],
    "wrap_existing_client.py": [
        r"201 after 2 attempts; replayed: True",
        r"payments on the server: 1",
    ],
    "resume_after_crash.py": [
        r"indeterminate: indeterminate key \S+",
        r"resumed order-99 -> succeeded replayed: True",
        r"payments on the server: 1$",
    ],
    "opentelemetry_metrics.py": [
        r"^outcome: succeeded after 3 attempts$",
        r"^span idemclient POST: succeeded$",
        r"^  span POST attempt 1: 503 throttled$",
        r"^  span POST attempt 3: 201 succeeded$",
        r"^idemclient_attempts_total\{.*server_address=\"psp.test\".*\} 3\.0$",
        r"^idemclient_retries_total\{.*idemclient_reason=\"server_error\".*\} 1\.0$",
        r"^idemclient_outcomes_total\{.*idemclient_state=\"succeeded\".*\} 1\.0$",
        r"^idemclient_store_duration_seconds_count\{.*idemclient_store_call=\"finish\"",
    ],
    "batch_from_python.py": [
        r"50 rows, 50 succeeded, 0 replayed",
        r"50 rows, 50 succeeded \(50 already done\), 0 replayed",
        r"payouts on the server: 50$",
    ],
    "webhook_receiver.py": [
        r"webhook deliveries: (\d+) for 5 events",
        r"orders paid: 5 of 5; paid more than once: 0; ledger entries: 5$",
        r"^EVERY EVENT APPLIED EXACTLY ONCE$",
    ],
    "webhook_ordering.py": [
        r"delivered 6 events in 8 posts, newest first",
        r"ignored as older than the state applied: (payment\.created(, )?){3}$",
        r"payment statuses: succeeded, succeeded, succeeded$",
        r"^EVERY PAYMENT ENDS SUCCEEDED$",
    ],
    "demo.py": [
        r"SIGKILL sent with \d+ payouts applied on the server",
        r"payouts on the server: 300 for 300 rows",
        r"applied exactly once at both external systems: 300",
        r"references paid more than once: 0",
        r"EVERY ROW APPLIED EXACTLY ONCE",
    ],
}


#: Examples that need a PostgreSQL database; the PostgreSQL tests run them against the
#: server they start (tests/postgres/test_outbox.py).
NEEDS_POSTGRESQL = {"outbox.py"}


def test_every_example_is_checked() -> None:
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(EXPECTED) | NEEDS_POSTGRESQL


#: Run on a terminal instead (below): its output is a terminal's.
ON_A_TERMINAL = {"demo.py"}


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - ON_A_TERMINAL))
def test_example_runs(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=tmp_path,  # examples write their stores where they are run
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for pattern in EXPECTED[name]:
        assert re.search(pattern, done.stdout, re.MULTILINE), (pattern, done.stdout)
    assert "Traceback" not in done.stderr


def test_the_readme_example_is_the_quickstart_file() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert block is not None, "the README shows a Python example"
    code = (EXAMPLES / "quickstart.py").read_text()
    body = code.split('"""', 2)[2].lstrip("\n")  # the file without its docstring
    assert block.group(1) == body


def test_the_readme_example_runs_twice_without_paying_twice(tmp_path: Path) -> None:
    runs = [
        subprocess.run(
            [sys.executable, str(EXAMPLES / "quickstart.py")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1]  # the second run is answered from the store: same payment


def test_the_demo_runs_on_an_80_column_terminal_and_its_sigkill_note_has_its_own_line(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "demo"
    code, output = run_in_terminal(
        [sys.executable, str(EXAMPLES / "demo.py"), str(kept)], columns=80
    )
    text = output.replace("\r\n", "\n")
    assert code == 0, text
    # The report each run says it wrote is there once the demo has ended.
    written = set(re.findall(r"report written to (\S+)", text))
    assert written == {str(kept / "report.csv")}, written
    assert f"the report stays at {kept / 'report.csv'}" in text
    assert (kept / "report.csv").read_text().startswith("row,ref,key,state")
    for pattern in EXPECTED["demo.py"]:
        assert re.search(pattern, text, re.MULTILINE), (pattern, text)
    assert "Traceback" not in text
    # The killed submitter leaves its progress line unfinished: the note starts anew.
    before, _, _ = text.partition("SIGKILL sent with")
    assert before.endswith("\n"), before[-200:]
