"""`idemclient batch submit` never pays a row twice (issue 12), shown through the
command, a real process, against the reference server on 127.0.0.1, and checked
against the server's ledger: a row is its reference, not its file, not its value date.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
    key_from_identity,
)
from idemclient.batch import Batch, read_batch, submit
from idemclient.batch._cli import submit_command
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, serve

from .support import (
    command,
    exactly_once,
    key_of,
    ledger_by_reference,
    payroll,
    read_report,
    references,
    run,
)

DAY = 86_400.0
ROWS = 12


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "payroll-nov.csv").write_text(payroll(ROWS))
    return tmp_path


def submit_file(
    live: LiveServer,
    work: Path,
    *extra: str,
    name: str = "payroll-nov.csv",
    token: str | None = "payroll-ops",
    report: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    store = work / "batches.db"
    return run(command(live.url, work / name, store, *extra, token=token, report=report))


# -- 1. a renamed file, references that repeat, stores of the previous version ------------


def test_a_renamed_copy_of_a_file_pays_no_row_again(live: LiveServer, work: Path) -> None:
    first = submit_file(live, work, report=work / "first.csv")
    assert first.returncode == 0, first.stderr
    shutil.copy(work / "payroll-nov.csv", work / "payroll-nov (1).csv")  # a downloaded copy
    again = submit_file(live, work, name="payroll-nov (1).csv", report=work / "again.csv")
    assert again.returncode == 0, again.stderr
    # Nothing was sent for them: already done, not replayed (in the summary and report).
    assert f"{ROWS} succeeded ({ROWS} already done), 0 replayed" in again.stdout
    lines = read_report(work / "again.csv")
    assert {(line["already_done"], line["replayed"]) for line in lines} == {("True", "False")}
    assert all(line["reason"].startswith("already done:") for line in lines)
    exactly_once(live, references(ROWS))
    keys = [line["key"] for line in read_report(work / "first.csv")]
    assert [line["key"] for line in read_report(work / "again.csv")] == keys
    assert keys == [key_of(reference) for reference in references(ROWS)]


def test_references_that_repeat_across_files_need_a_scope_then_pay_once_each(
    live: LiveServer, work: Path
) -> None:
    november = payroll(ROWS, prefix="E", value_date="2026-11-30")  # employee ids as refs
    december = payroll(ROWS, prefix="E", value_date="2026-12-31", amount=120_000)
    (work / "nov.csv").write_text(november)
    (work / "dec.csv").write_text(december)
    assert submit_file(live, work, name="nov.csv").returncode == 0
    refused = submit_file(live, work, name="dec.csv")
    assert refused.returncode == 2
    assert "reference 'E1000' was submitted before with other content" in refused.stderr
    assert "value_date '2026-11-30' -> '2026-12-31'" in refused.stderr
    assert "--batch-ref" in refused.stderr
    assert len(live.server.ledger()) == ROWS  # nothing was sent
    scoped = submit_file(live, work, "--batch-ref", "2026-12", name="dec.csv")
    assert scoped.returncode == 0, scoped.stderr
    again = submit_file(live, work, "--batch-ref", "2026-12", name="dec.csv")
    assert again.returncode == 0
    by_reference = ledger_by_reference(live)
    assert len(live.server.ledger()) == 2 * ROWS
    assert len(by_reference["E1000"]) == len(by_reference["2026-12/E1000"]) == 1
    assert by_reference["2026-12/E1000"][0].idempotency_key == key_of("E1000", "2026-12")


def _previous_version_store(live: LiveServer, work: Path, *, unfinished: set[str]) -> None:
    """What the previous version's batch command left in a store for payroll-nov.csv:
    keys from the file's name and the value date, operation id = key; the rows in
    `unfinished` never got through (not sent)."""
    batch = read_batch(work / "payroll-nov.csv")
    for reference in unfinished:
        live.server.answer(503, key=_old_key(reference))
    with Client(
        store=work / "batches.db",
        base_url=live.url,
        headers={"Authorization": "Bearer payroll-ops"},
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        for row in batch.rows:
            body = json.dumps(row.payload(), separators=(",", ":"), ensure_ascii=False)
            try:
                client.post(
                    "/v1/payouts",
                    content=body.encode(),
                    headers={"Content-Type": "application/json"},
                    key=_old_key(row.reference),
                    reference=row.reference,
                )
            except NotSent:
                assert row.reference in unfinished


def _old_key(reference: str) -> str:
    return key_from_identity("payroll-nov", reference, "payout", "2026-11-30")


def test_a_store_written_by_the_previous_version_keeps_its_keys(
    live: LiveServer, work: Path
) -> None:
    unfinished = {"2026-11-E1003", "2026-11-E1007"}
    _previous_version_store(live, work, unfinished=unfinished)
    assert len(live.server.ledger()) == ROWS - 2
    shutil.copy(work / "payroll-nov.csv", work / "renamed.csv")
    done = submit_file(live, work, name="renamed.csv", report=work / "r.csv")
    assert done.returncode == 0, done.stderr
    exactly_once(live, references(ROWS))
    for line in read_report(work / "r.csv"):  # every row under the key it had
        assert line["key"] == _old_key(line["ref"])
    for entry in live.server.ledger():
        assert entry.idempotency_key == _old_key(entry.reference)


# -- 2. an edited row ------------------------------------------------------------------------


def test_an_edited_value_date_is_refused_before_anything_is_sent(
    live: LiveServer, work: Path
) -> None:
    assert submit_file(live, work).returncode == 0
    edited = payroll(ROWS).replace("2026-11-E1003,E1003,Employee 3,", "2026-11-E1003,E1003,Ada,")
    lines = edited.split("\n")
    lines[5] = lines[5].replace("2026-11-30", "2026-12-01")  # row 5's value date
    (work / "payroll-nov.csv").write_text("\n".join(lines))
    done = submit_file(live, work)
    assert done.returncode == 2
    assert (
        "row 4: reference '2026-11-E1003' was submitted before with other content:" in done.stderr
    )
    assert "name 'Employee 3' -> 'Ada'" in done.stderr
    assert "value_date '2026-11-30' -> '2026-12-01'" in done.stderr
    assert "nothing was sent" in done.stderr
    exactly_once(live, references(ROWS))


# -- 3. the server's memory, and the look-up ------------------------------------------------


@pytest.mark.parametrize("forgotten", ["store deleted", "store purged"])
def test_a_rerun_after_the_server_forgot_its_keys_is_looked_up_not_paid_again(
    live: LiveServer, work: Path, forgotten: str
) -> None:
    assert submit_file(live, work).returncode == 0
    if forgotten == "store deleted":
        for leftover in work.glob("batches.db*"):
            leftover.unlink()
    else:
        purged = run(
            [sys.executable, "-m", "idemclient", "ops", "purge", "--older-than", "0",
             "--store", str(work / "batches.db")]
        )  # fmt: skip
        assert purged.returncode == 0, purged.stderr
        assert f"purged {ROWS}" in purged.stdout
    live.server.advance(2 * DAY)
    assert live.server.reap() == ROWS  # the server's keys are gone; its payouts are not
    again = submit_file(live, work, report=work / "r.json")
    assert again.returncode == 0, again.stderr
    assert f"{ROWS} found on the server by look-up" in again.stdout
    exactly_once(live, references(ROWS))
    lines = read_report(work / "r.json")
    assert all(line["reason"].startswith("found on the server by look-up") for line in lines)
    assert all(line["already_done"] == "True" for line in lines)


@pytest.mark.parametrize(
    "recorded",
    [-2 * DAY, 30 * DAY, 0.0],
    ids=["2 days ago", "in the future", "2 days ago by the server's clock only"],
)
def test_a_record_past_the_key_retention_is_looked_up_before_it_is_sent(
    live: LiveServer, work: Path, recorded: float
) -> None:
    # This machine registered the file (never sent: the server was refusing) when its
    # clock said `recorded`; another machine has paid it since, and the server has
    # forgotten that machine's keys. Recorded "now": this host's clock was set back
    # while nothing ran, by the two days the server's clock has moved on since; the
    # server's `Date` (its answer to the command's first request) tells the age.
    live.server.answer(503, times=ROWS, path="/v1/payouts")
    with Client(
        store=work / "batches.db",
        clock=ManualClock(start=time.time() + recorded),
        base_url=live.url,
        headers={"Authorization": "Bearer payroll-ops"},
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        rows = [{"ref": r, "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}
                for r in references(ROWS)]  # fmt: skip
        report = submit(Batch.from_records(rows), client, lookup=None)
    assert {line.state for line in report.rows} == {"not_sent"}
    (work / "small.csv").write_text(
        "ref,amount,currency,value_date\n"
        + "".join(f"{r},100,GBP,2026-11-30\n" for r in references(ROWS))
    )
    other = run(command(live.url, work / "small.csv", work / "elsewhere.db"))
    assert other.returncode == 0, other.stderr
    live.server.advance(2 * DAY)
    live.server.reap()
    again = submit_file(live, work, name="small.csv")
    assert again.returncode == 0, again.stderr
    assert f"{ROWS} found on the server by look-up" in again.stdout
    exactly_once(live, references(ROWS))


@pytest.mark.parametrize(
    ("options", "answer", "why"),
    [
        (("--path", "/v1/payout"), None, "HTTP 404: the look-up itself was not found"),
        (("--lookup", "/v1/search?ref={reference}"), None, "HTTP 404"),
        ((), 403, "HTTP 403"),
    ],
)
def test_a_look_up_that_does_not_work_stops_the_run_before_anything_is_sent(
    live: LiveServer, work: Path, options: tuple[str, ...], answer: int | None, why: str
) -> None:
    if answer is not None:
        live.server.answer(answer, times=100, path="/v1/payouts")
    done = submit_file(live, work, *options, "--max-attempts", "2")
    assert done.returncode == 2
    assert "the look-up does not work" in done.stderr
    assert why in done.stderr
    assert "Nothing was sent" in done.stderr
    assert live.server.ledger() == ()
    with SQLiteStore(work / "batches.db") as store:
        assert sum(store.counts().values()) == 0


def test_a_payment_found_with_other_content_is_refused_showing_both(
    live: LiveServer, work: Path
) -> None:
    with Client(
        store=work / "other.db", base_url=live.url, headers={"Authorization": "Bearer payroll-ops"}
    ) as elsewhere:  # the same reference paid from elsewhere, with another amount
        elsewhere.post(
            "/v1/payouts",
            json={"reference": "2026-11-E1002", "amount": 999, "currency": "GBP"},
            key="paid-by-hand",
        )
    done = submit_file(live, work)
    assert done.returncode == 2
    assert (
        "row 3: reference '2026-11-E1002' is already on the server with other content"
        in done.stderr
    )
    assert "amount 100002 here, 999 there" in done.stderr
    assert len(live.server.ledger()) == 1


@pytest.mark.parametrize(
    ("fault", "state", "code", "reason"),
    [
        ("decline", "failed", 4, "status 'declined'"),
        ("pending", "indeterminate", 3, "not final yet"),
    ],
)
def test_a_payment_found_declined_or_not_final_is_not_sent(
    live: LiveServer, work: Path, fault: str, state: str, code: int, reason: str
) -> None:
    if fault == "decline":
        live.server.external_fault(1, "decline")
    else:
        live.server.crash("H1_DONE", path="/v1/payouts")  # created, then the worker died
    payment = {"reference": "2026-11-E1004", "amount": 100_004, "currency": "GBP"}
    with Client(
        store=work / "other.db",
        base_url=live.url,
        headers={"Authorization": "Bearer payroll-ops"},
        policy=RetryPolicy(max_attempts=1),
    ) as elsewhere:  # the row, paid from elsewhere
        if fault == "decline":
            assert elsewhere.post("/v1/payouts", json=payment).state is State.FAILED
        else:
            with pytest.raises(Indeterminate):
                elsewhere.post("/v1/payouts", json=payment)
    done = submit_file(live, work, report=work / "r.csv")
    assert done.returncode == code, done.stderr
    line = read_report(work / "r.csv")[4]
    assert (line["ref"], line["state"]) == ("2026-11-E1004", state)
    assert reason in line["reason"]
    assert len(ledger_by_reference(live)["2026-11-E1004"]) == 1  # never sent again


def test_no_lookup_sends_without_asking_and_its_help_says_what_it_risks(
    live: LiveServer, work: Path
) -> None:
    no_lookup = next(p for p in submit_command.params if p.name == "no_lookup")
    assert isinstance(no_lookup, click.Option)
    assert no_lookup.help is not None
    assert "pays twice" in no_lookup.help
    assert submit_file(live, work).returncode == 0
    for leftover in work.glob("batches.db*"):
        leftover.unlink()
    live.server.advance(2 * DAY)
    live.server.reap()
    blind = submit_file(live, work, "--no-lookup")
    assert blind.returncode == 0
    assert "looking up" not in blind.stderr
    assert len(live.server.ledger()) == 2 * ROWS  # the risk, as documented


# -- 4. a wrong --path, --url or token does not poison the store ---------------------------


def test_a_wrong_path_does_not_poison_the_store(live: LiveServer, work: Path) -> None:
    wrong = submit_file(live, work, "--path", "/v1/payout", "--no-lookup", report=work / "1.csv")
    assert wrong.returncode == 4  # every row 404: refused, never applied
    fixed = submit_file(live, work, report=work / "2.csv")
    assert fixed.returncode == 0, fixed.stderr
    assert f"{ROWS} never applied at an earlier URL, path or token, sent again" in fixed.stdout
    exactly_once(live, references(ROWS))
    first, second = read_report(work / "1.csv"), read_report(work / "2.csv")
    assert [line["key"] for line in first] == [line["key"] for line in second]
    assert all(line["reason"].startswith("sent again under its key") for line in second)
    for entry in live.server.ledger():
        assert entry.idempotency_key == key_of(entry.reference)


def test_a_wrong_url_does_not_poison_the_store(live: LiveServer, work: Path) -> None:
    with ReferenceServer() as elsewhere, serve(elsewhere) as wrong:
        wrong.server.answer(404, times=1000)  # not a PSP at all
        caught = run(command(wrong.url, work / "payroll-nov.csv", work / "batches.db"))
        assert caught.returncode == 2  # the look-up finds out before anything is sent
        assert "the look-up does not work" in caught.stderr
        blind = run(
            command(wrong.url, work / "payroll-nov.csv", work / "batches.db", "--no-lookup")
        )
        assert blind.returncode == 4
    fixed = submit_file(live, work)
    assert fixed.returncode == 0, fixed.stderr
    exactly_once(live, references(ROWS))


def test_a_wrong_token_does_not_poison_the_store(live: LiveServer, work: Path) -> None:
    refused = submit_file(live, work, token="not!a!token")  # malformed: HTTP 401
    assert refused.returncode == 2
    assert "refused the credentials (HTTP 401)" in refused.stderr
    assert "check the token" in refused.stderr
    blind = submit_file(live, work, "--no-lookup", token="not!a!token")
    assert blind.returncode == 2
    assert "check the token" in blind.stdout
    assert "run the same command again" not in blind.stdout
    assert "0 replayed" in blind.stdout  # rows never sent are not "replayed"
    assert f"{ROWS} not sent" in blind.stdout
    fixed = submit_file(live, work)
    assert fixed.returncode == 0, fixed.stderr
    exactly_once(live, references(ROWS))


# -- 5. the report ---------------------------------------------------------------------------


def _locked(directory: Path) -> list[str]:
    """A prefix that runs a command without root's power over file modes."""
    directory.mkdir()
    directory.chmod(0o500)
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to drop root's powers"
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.parametrize("where", ["missing directory", "the input file", "no write access"])
def test_a_report_that_cannot_be_written_is_refused_before_anything_is_sent(
    live: LiveServer, work: Path, where: str
) -> None:
    original = (work / "payroll-nov.csv").read_bytes()
    prefix: list[str] = []
    if where == "missing directory":
        report = work / "reports" / "nov.csv"
    elif where == "the input file":
        report = work / "payroll-nov.csv"
    else:
        prefix = _locked(work / "locked")
        report = work / "locked" / "nov.csv"
    done = run(
        [*prefix, *command(live.url, work / "payroll-nov.csv", work / "batches.db", report=report)]
    )
    assert done.returncode == 2, done.stderr
    assert "nothing was sent" in done.stderr
    assert "Traceback" not in done.stderr
    assert live.server.ledger() == ()
    assert not (work / "batches.db").exists()
    assert (work / "payroll-nov.csv").read_bytes() == original


def test_the_json_report_names_the_url_without_its_credentials(
    live: LiveServer, work: Path
) -> None:
    # httpx sends a URL's user and password as Basic credentials: the server refuses
    # them, and the refused batch's report still names where it went.
    with_password = live.url.replace("http://", "http://ops:SECRET_PASSWORD@")
    done = run(
        command(
            with_password, work / "payroll-nov.csv", work / "batches.db", report=work / "r.json"
        )
    )
    assert done.returncode == 2, done.stdout + done.stderr
    written = (work / "r.json").read_text()
    assert json.loads(written)["batch"]["url"] == live.url
    assert "SECRET_PASSWORD" not in written


def test_report_cells_a_spreadsheet_would_run_are_escaped(live: LiveServer, work: Path) -> None:
    (work / "payroll-nov.csv").write_text(
        "ref,amount,currency,value_date\n"
        '"=HYPERLINK(""http://evil.example"")",100,GBP,2026-11-30\n'
        "+44207946,100,GBP,2026-11-30\n"
        "@SUM(A1),100,GBP,2026-11-30\n"
        "-1,100,GBP,2026-11-30\n"
        "plain-1,100,GBP,2026-11-30\n"
    )
    done = submit_file(live, work, report=work / "r.csv")
    assert done.returncode == 0, done.stderr
    refs = [line["ref"] for line in read_report(work / "r.csv")]
    assert refs == [
        "'=HYPERLINK(\"http://evil.example\")", "'+44207946", "'@SUM(A1)", "'-1", "plain-1",
    ]  # fmt: skip
    assert ledger_by_reference(live).keys() == {
        '=HYPERLINK("http://evil.example")', "+44207946", "@SUM(A1)", "-1", "plain-1",
    }  # fmt: skip


def test_a_budget_cut_run_says_so_in_the_summary_and_the_reason_column(
    live: LiveServer, work: Path
) -> None:
    for reference in references(3):
        live.server.answer(503, times=2, key=key_of(reference))
    done = submit_file(live, work, "--retry-budget", "0", report=work / "r.json")
    assert done.returncode == 3
    assert "3 stopped by the client's retry budget" in done.stdout
    assert "--retry-budget" in done.stdout
    document = json.loads((work / "r.json").read_text())
    reasons = [row["reason"] for row in document["rows"]]
    assert sum(reason.startswith("stopped by the retry budget") for reason in reasons) == 3
    assert document["batch"]["stopped_by_retry_budget"] == 3
    assert document["batch"]["source"].endswith("payroll-nov.csv")
    assert document["batch"]["url"] == live.url
    assert document["batch"]["exit_code"] == 3
    again = submit_file(live, work, report=work / "r.json")  # a budget of its own
    assert again.returncode == 0, again.stderr
    exactly_once(live, references(ROWS))


# -- 6. messages and exit codes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token": ""}, "the token is empty"),
        ({"token": " "}, "the token is empty"),
        ({"url": "127.0.0.1:9"}, "has no scheme or host"),
        ({"url": "psp.example.com"}, "has no scheme or host"),
    ],
)
def test_an_empty_token_or_a_url_without_a_scheme_is_bad_input(
    live: LiveServer, work: Path, options: dict[str, str], message: str
) -> None:
    url = options.get("url", live.url)
    argv = command(
        url, work / "payroll-nov.csv", work / "batches.db", token=options.get("token", "t")
    )
    done = run(argv)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "cannot reach" not in done.stderr
    assert live.server.ledger() == ()


def test_an_https_url_to_a_plain_http_server_is_bad_input_not_run_again(
    live: LiveServer, work: Path
) -> None:
    url = live.url.replace("http://", "https://")
    done = run(command(url, work / "payroll-nov.csv", work / "batches.db"))
    assert done.returncode == 2, done.stderr  # running it again would fail the same way
    assert "http://" in done.stderr  # what to write instead
    assert "run the same command again" not in done.stderr
    assert live.server.ledger() == ()


def test_an_unset_token_variable_is_named(live: LiveServer, work: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "IDEMCLIENT_TOKEN"}
    done = run(command(live.url, work / "payroll-nov.csv", work / "b.db", token=None), env=env)
    assert done.returncode == 2
    assert "IDEMCLIENT_TOKEN" in done.stderr


def test_a_negative_amount_is_told_to_be_positive(live: LiveServer, work: Path) -> None:
    (work / "payroll-nov.csv").write_text(payroll(ROWS).replace(",100003,", ",-100,"))
    done = submit_file(live, work)
    assert done.returncode == 2
    assert "row 4: amount '-100' is negative: an amount must be positive" in done.stderr
    assert "not a whole number" not in done.stderr


def test_a_semicolon_separated_file_is_named_and_read_with_delimiter(
    live: LiveServer, work: Path
) -> None:
    (work / "payroll-nov.csv").write_text(payroll(ROWS, delimiter=";"))
    done = submit_file(live, work)
    assert done.returncode == 2
    assert "looks semicolon-separated" in done.stderr
    assert "--delimiter ';'" in done.stderr
    read = submit_file(live, work, "--delimiter", ";")
    assert read.returncode == 0, read.stderr
    exactly_once(live, references(ROWS))


def test_every_option_has_help_and_the_environment_variables_are_shown() -> None:
    for param in submit_command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{param.name} has no help"
    done = run([sys.executable, "-m", "idemclient", "batch", "submit", "--help"])
    shown = " ".join(done.stdout.split())  # as wrapped for the terminal's width
    assert "env var: IDEMCLIENT_TOKEN" in shown
    assert "env var: IDEMCLIENT_URL" in shown
    assert "--retry-budget" in shown


#: `python -m idemclient` with Ctrl-C at its default, as a terminal's foreground job has
#: it: `python -c _FOREGROUND ARGS...`.
_FOREGROUND = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler);"
    " runpy.run_module('idemclient', run_name='__main__', alter_sys=True)"
)


def test_ctrl_c_exits_130_with_the_summary_and_the_report(live: LiveServer, work: Path) -> None:
    (work / "payroll-nov.csv").write_text(payroll(300))
    for reference in references(300):  # slow enough to be interrupted half way
        live.server.delay(0.02, key=key_of(reference))
    argv = command(
        live.url, work / "payroll-nov.csv", work / "batches.db", "--concurrency", "2",
        report=work / "r.json",
    )  # fmt: skip
    # Run as a shell runs a command in the foreground, Ctrl-C at its default: a test run
    # started in the background ignores SIGINT, and its children inherit that (the
    # command then ran to its end and exited 0).
    assert argv[1:3] == ["-m", "idemclient"]
    argv = [sys.executable, "-c", _FOREGROUND, *argv[3:]]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Interrupted once the command says 30 rows are done (its own progress lines), not
    # once the server's ledger shows 20: reading the ledger waits on the database the
    # server writes, and on a loaded machine one reading outlasted the whole run (which
    # then ended with exit 0 before the signal). Read until that line, or the command's
    # end: a loop bounded by its output.
    told: list[str] = []
    assert process.stderr is not None
    for line in process.stderr:
        told.append(line)
        if "[30/300]" in line:
            break
    process.send_signal(signal.SIGINT)
    out, rest = process.communicate(timeout=60)
    err = "".join(told) + rest
    assert process.returncode == 130, err
    assert "300 rows" in out
    assert "interrupted: run the same command again to finish" in out
    document = json.loads((work / "r.json").read_text())
    assert document["batch"]["interrupted"] is True
    assert document["batch"]["exit_code"] == 130
    assert len(document["rows"]) == 300
    done = [row for row in document["rows"] if row["state"] == "succeeded"]
    assert 30 <= len(done) < 300
    rest = {row["reason"] for row in document["rows"] if row["state"] != "succeeded"}
    assert rest == {"not sent: interrupted; run again"}
    assert "Traceback" not in err
    finished = run(argv)
    assert finished.returncode == 0, finished.stderr
    exactly_once(live, references(300))


def test_ctrl_c_during_the_start_up_check_still_writes_the_report(work: Path) -> None:
    # A server that takes the connection and never answers: the start-up check waits.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        argv = command(url, work / "payroll-nov.csv", work / "batches.db", report=work / "r.json")
        argv = [sys.executable, "-c", _FOREGROUND, *argv[3:]]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            connection, _ = silent.accept()  # the command's own check has reached us
            with connection:
                connection.settimeout(60)
                assert connection.recv(1024).startswith(b"GET / ")
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 130, err
    assert f"{ROWS} rows" in out
    assert "Traceback" not in err
    document = json.loads((work / "r.json").read_text())
    assert document["batch"]["interrupted"] is True
    assert [row["state"] for row in document["rows"]] == ["not_sent"] * ROWS
    assert all("interrupted before anything was sent" in row["reason"] for row in document["rows"])


# -- a refusal after a lost answer -------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "exit_code", "state"),
    [
        ((), 3, "indeterminate"),  # the server may be refusing a duplicate of a payout it made
        (("--server-replays",), 4, "failed"),  # a server that replays: the refusal is final
    ],
)
def test_a_refusal_after_a_lost_answer_is_final_only_where_the_server_replays(
    live: LiveServer, work: Path, flags: tuple[str, ...], exit_code: int, state: str
) -> None:
    reference = references(ROWS)[0]
    live.server.drop(key=key_of(reference))  # applied, and the answer lost
    live.server.answer(422, key=key_of(reference))  # then refused, unmarked
    done = submit_file(live, work, *flags, report=work / "report.csv")
    assert done.returncode == exit_code, done.stderr
    rows = {line["ref"]: line for line in read_report(work / "report.csv")}
    assert rows[reference]["state"] == state
    exactly_once(live, references(ROWS))


def test_no_server_clock_sends_a_row_a_server_with_a_wrong_date_would_hold(
    tmp_path: Path, work: Path
) -> None:
    # A server whose Date is forty days ahead (a faked clock, a week-year formatting
    # bug): judged by it, a row that may have been applied a moment ago is past its
    # key retention, so a run that may not look it up leaves it unsettled for ever;
    # `--no-server-clock` is the way out that `Client(server_clock=False)` gives code.
    (work / "payroll-nov.csv").write_text(payroll(1))
    ahead = ManualClock(start=time.time() + 40 * DAY)
    with (
        ReferenceServer(clock=ahead, db=str(tmp_path / "psp.sqlite3")) as server,
        serve(server) as live,
    ):
        server.drop(key=key_of("2026-11-E1000"))  # applied, its answer lost
        first = submit_file(live, work, "--no-lookup", "--max-attempts", "1")
        assert first.returncode == 3, first.stderr
        held = submit_file(live, work, "--no-lookup", report=work / "held.csv")
        assert held.returncode == 5, held.stderr  # a rerun cannot settle it: said apart
        [row] = read_report(work / "held.csv")
        assert "by the server's clock" in row["reason"], row
        sent = submit_file(live, work, "--no-lookup", "--no-server-clock")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        exactly_once(live, ["2026-11-E1000"])


def test_a_row_found_not_final_two_days_old_by_the_server_s_clock_is_not_sent_again(
    live: LiveServer, work: Path
) -> None:
    # The row's payout was created at the server, whose worker then died: pending there,
    # maybe applied here. Two days pass by the server's clock, and it forgets the key;
    # this host's clock says minutes (set back while nothing ran, as far as the store
    # can tell). Looked up, the payout is found not final: sent again under its key it
    # would be a second payout (the key is gone), so it is left unsettled, not sent.
    (work / "one.csv").write_text(payroll(1))
    live.server.crash("H1_DONE", path="/v1/payouts")  # created, then the worker died
    first = submit_file(live, work, name="one.csv")
    assert first.returncode == 3, first.stderr
    live.server.advance(2 * DAY)
    live.server.reap()
    again = submit_file(live, work, name="one.csv", report=work / "r.csv")
    assert again.returncode == 3, again.stderr
    (line,) = read_report(work / "r.csv")
    assert line["state"] == "indeterminate"
    assert "not final yet" in line["reason"]
    assert len(ledger_by_reference(live)["2026-11-E1000"]) == 1  # never sent again
