"""What a batch run came to: one line per row, a summary, the exit code, and the file.

The report file is checked before anything is sent (`check_report_path`): a path that
cannot be written is refused while nothing has happened yet, and so is the input file
or the store itself. It is written atomically (a temporary file beside it, then a
rename), so a reader never sees half of one, and an earlier report is replaced only by
a whole new one. CSV cells that a spreadsheet would run as a formula (`=`, `+`, `-`,
`@`, and a leading tab or carriage return) are written with a leading `'`. A JSON
report holds the batch's metadata, the summary and the rows.
"""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import json
import os
import secrets
import signal
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .._outcome import Outcome, State

__all__ = ["REPORT_COLUMNS", "ExitCode", "Report", "ReportRow", "check_report_path"]


class ExitCode(enum.IntEnum):
    """What the `idemclient batch submit` command exits with."""

    #: every row succeeded (now or in an earlier run)
    OK = 0
    #: bad input (the file, an option, a look-up that does not work, refused
    #: credentials): nothing was sent for the rows concerned
    BAD_INPUT = 2
    #: some rows are indeterminate or not sent yet: run the same command again
    RUN_AGAIN = 3
    #: some rows got a final refusal from the server (and none is left to run again)
    FAILED = 4
    #: some rows may have been applied and a rerun cannot settle them (past the key
    #: retention, without a look-up by reference): `idemclient ops reconcile` each one
    #: (its reason says how), and none is left to run again
    RECONCILE = 5
    #: stopped by SIGHUP (the terminal went away: an SSH session dropped): run the
    #: same command again to finish
    HANGUP = 129
    #: interrupted (Ctrl-C): run the same command again to finish
    INTERRUPTED = 130
    #: stopped by SIGTERM (a service manager, `kill`): run the same command again
    TERMINATED = 143


#: The exit code of a run stopped by a signal (128 and its number, as a shell says).
_BY_SIGNAL = {
    int(signal.SIGHUP): ExitCode.HANGUP,
    int(signal.SIGINT): ExitCode.INTERRUPTED,
    int(signal.SIGTERM): ExitCode.TERMINATED,
}

#: Statuses about the credentials, not the row: fix the token, then run again.
_CREDENTIALS = frozenset({401, 407})
_UNSETTLED = frozenset(
    s.value for s in (State.NOT_SENT, State.INDETERMINATE, State.PENDING, State.IN_FLIGHT)
)
#: Unsettled, and nothing of it can have been applied (the store keeps an unsettled
#: operation that may have been applied as indeterminate, or in flight).
_NOT_APPLIED = frozenset(s.value for s in (State.NOT_SENT, State.PENDING))


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One row of the report. `replayed`: sent in this run, the server answered it with
    the answer it keeps for its key (an earlier attempt's, maybe another run's).
    `already_done`: done before this run (answered from the store, or found on the
    server by a look-up): nothing was sent for it now. `reason`: what happened to the
    row, in words."""

    row: int
    ref: str
    key: str
    state: str
    http_status: int | None
    resource_id: str | None
    attempts: int
    replayed: bool
    reason: str = ""
    already_done: bool = False
    #: may have been applied, and only a look-up settles it that a rerun would not make:
    #: `idemclient ops reconcile`, as `reason` says
    reconcile: bool = False

    @classmethod
    def of(
        cls,
        row: int,
        ref: str,
        outcome: Outcome,
        reason: str = "",
        *,
        already_done: bool | None = None,
    ) -> ReportRow:
        """The line of a row that came to `outcome`; `already_done` defaults to
        whether the store answered it with a final answer (a row the store holds in
        flight, being sent by another process, is not done)."""
        return cls(
            row=row,
            ref=ref,
            key=outcome.key,
            state=outcome.state.value,
            http_status=outcome.last_status,
            resource_id=resource_id(outcome.response.content if outcome.response else None),
            attempts=outcome.attempts,
            replayed=outcome.replayed and not outcome.from_store,
            reason=reason,
            already_done=(
                outcome.from_store and outcome.state.finished
                if already_done is None
                else already_done
            ),
        )

    @property
    def credentials_refused(self) -> bool:
        """The server refused the credentials for this row, which is unsettled."""
        return self.state in _UNSETTLED and self.http_status in _CREDENTIALS

    @property
    def maybe_applied(self) -> bool:
        """Unsettled, and may have been applied (indeterminate, or in flight)."""
        return self.state in _UNSETTLED and self.state not in _NOT_APPLIED


def resource_id(content: bytes | None) -> str | None:
    """The `id` of the payment an answer's JSON body names (or of its only item)."""
    if not content:
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("data"), list) and len(body["data"]) == 1:
        body = body["data"][0]
    value = body.get("id") if isinstance(body, dict) else None
    return str(value) if value is not None else None


#: Where an error body says why, in the dialects payment APIs speak: problem+json
#: (`detail`, `title`), Stripe's and others' `error.message`, DRF's `detail`, PayPal's
#: `message` and its `details[].description`, `errors[].message`.
_WHY = (
    ("detail",),
    ("message",),
    ("error", "message"),
    ("error",),
    ("errors", 0, "message"),
    ("errors", 0, "detail"),
    ("details", 0, "description"),
    ("details", 0, "issue"),
    ("error_description",),
    ("title",),
)
#: A refusal's reason is cut to this many characters in the report.
MAX_REFUSAL = 300


def refusal_of(content: bytes | None) -> str | None:
    """What a refusal's JSON body says is wrong, in one line (None when it says
    nothing readable): for the report's reason, beside the status."""
    if not content:
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    for path in _WHY:
        value: Any = body
        for step in path:
            if isinstance(step, int):
                value = value[step] if isinstance(value, list) and len(value) > step else None
            else:
                value = value.get(step) if isinstance(value, dict) else None
        if isinstance(value, str) and value.strip():
            said = " ".join(value.split())
            return said if len(said) <= MAX_REFUSAL else said[: MAX_REFUSAL - 1] + "…"
    return None


REPORT_COLUMNS = tuple(f.name for f in fields(ReportRow))


@dataclass(frozen=True, slots=True)
class Report:
    """A batch run's outcome. `batch` names it in the summary (its scope, or its file);
    `metadata` goes into a JSON report; `notes` are sentences added to the summary;
    `interrupted`: the run was stopped before every row was done, by `signal` (the
    signal's number; None: Ctrl-C, or a caller's `stop()`); `refused`: the batch was
    refused before anything was sent (the rows' reasons say why)."""

    batch: str
    rows: tuple[ReportRow, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    interrupted: bool = False
    refused: bool = False
    signal: int | None = None

    def counts(self) -> Counter[str]:
        counts: Counter[str] = Counter(row.state for row in self.rows)
        counts["replayed"] = sum(row.replayed for row in self.rows)
        counts["already_done"] = sum(row.already_done for row in self.rows)
        counts["reconcile"] = self.to_reconcile
        for state in (State.SUCCEEDED, State.FAILED):
            counts[f"{state.value}_already_done"] = sum(
                row.already_done for row in self.rows if row.state == state.value
            )
        return counts

    @property
    def credentials_refused(self) -> int:
        """Rows the server refused the credentials for, and of which nothing can have
        been applied: the same command with the right token sends them."""
        return sum(row.credentials_refused and not row.maybe_applied for row in self.rows)

    @property
    def credentials_refused_maybe_applied(self) -> int:
        """Rows the server refused the credentials for after an attempt that may have
        been applied (a lost answer, then a 401): unsettled, to be run again."""
        return sum(row.credentials_refused and row.maybe_applied for row in self.rows)

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return _BY_SIGNAL.get(self.signal or 0, ExitCode.INTERRUPTED)
        if self.refused or self.credentials_refused:
            return ExitCode.BAD_INPUT
        # A row a rerun cannot settle is not a reason to run again: it would loop.
        states = {row.state for row in self.rows if not row.reconcile}
        if states & _UNSETTLED:
            return ExitCode.RUN_AGAIN
        if self.to_reconcile:
            return ExitCode.RECONCILE
        if State.FAILED.value in states:
            return ExitCode.FAILED
        return ExitCode.OK

    @property
    def to_reconcile(self) -> int:
        """Rows that may have been applied and that only `idemclient ops reconcile`
        settles (their reason says how): a rerun leaves them as they are."""
        return sum(row.reconcile for row in self.rows)

    def summary(self) -> str:
        counts = self.counts()
        parts = [f"{len(self.rows)} rows"]
        for name in ("succeeded", "replayed", "indeterminate", "not_sent", "failed"):
            part = f"{counts.get(name, 0)} {name.replace('_', ' ')}"
            earlier = counts.get(f"{name}_already_done", 0)
            # Done before this run: nothing was sent for them now (not a replay).
            parts.append(f"{part} ({earlier} already done)" if earlier else part)
        # Every row is counted: one another process is sending, or left as the store has
        # it, is said too.
        for state in (State.IN_FLIGHT, State.PENDING, State.CHALLENGED):
            if counts.get(state.value, 0):
                parts.append(f"{counts[state.value]} {state.words}")
        refused = self.credentials_refused
        maybe = self.credentials_refused_maybe_applied
        advice = {
            ExitCode.OK: "every row is done",
            ExitCode.INTERRUPTED: "interrupted: run the same command again to finish",
            ExitCode.TERMINATED: "stopped (SIGTERM): run the same command again to finish",
            ExitCode.HANGUP: "stopped (SIGHUP): run the same command again to finish",
            ExitCode.BAD_INPUT: (
                "refused before anything was sent: see why for each row concerned (in the"
                " errors, and the report's reasons)"
                if self.refused
                else f"the server refused the credentials (HTTP 401): check the token"
                f" (--token or IDEMCLIENT_TOKEN); nothing was applied for the {refused}"
                " row(s) it refused, and the same command with the right token sends them"
            ),
            ExitCode.RUN_AGAIN: "some rows are unsettled: run the same command again",
            ExitCode.RECONCILE: (
                f"{self.to_reconcile} row(s) may have been applied and a rerun cannot"
                " settle them: settle each with the `idemclient ops reconcile` command its"
                " reason gives (in the report, and above)"
            ),
            ExitCode.FAILED: "some rows were refused by the server: see the report",
        }[self.exit_code]
        if self.to_reconcile and self.exit_code is not ExitCode.RECONCILE:
            advice += (
                f". {self.to_reconcile} row(s) may have been applied and a rerun cannot"
                " settle them: settle each with the `idemclient ops reconcile` command its"
                " reason gives"
            )
        if maybe:
            advice += (
                f". The server refused the credentials (HTTP 401) for {maybe} row(s) after"
                " an attempt that may have been applied: they are indeterminate; check the"
                " token, then run the same command again to settle them"
            )
        notes = "".join(f" {note}." for note in self.notes)
        return f"batch {self.batch}: " + ", ".join(parts) + f".{notes} {advice}."

    def document(self) -> dict[str, Any]:
        """The JSON report: metadata, summary and rows."""
        counts = self.counts()
        return {
            "batch": {
                **self.metadata,
                "interrupted": self.interrupted,
                "signal": None if self.signal is None else signal.Signals(self.signal).name,
                "refused": self.refused,
                "exit_code": int(self.exit_code),
                "counts": {name: counts.get(name, 0) for name in _COUNTED},
                "summary": self.summary(),
            },
            "rows": [asdict(row) for row in self.rows],
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the report as CSV or JSON, chosen by the file's extension, atomically:
        the file is whole, or as it was."""
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".json":
            text = json.dumps(self.document(), indent=2) + "\n"
        elif suffix == ".csv":
            out = io.StringIO(newline="")
            writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({name: _cell(value) for name, value in asdict(row).items()})
            text = out.getvalue()
        else:
            raise ValueError(f"report {target}: use a .csv or .json file name")
        _replace(target, text)


_COUNTED = (
    "succeeded",
    "failed",
    "indeterminate",
    "not_sent",
    "pending",
    "in_flight",
    "replayed",
    "already_done",
    "reconcile",
)
#: What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text, never runs: a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _replace(target: Path, text: str) -> None:
    """Write `text` to a temporary file beside `target`, then rename it over `target`.

    The file is created with mode 0666 less the umask, as any file a program writes for
    people to read (`mkstemp` makes 0600, which the rename would keep)."""
    handle, temporary = _temporary_beside(target)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _temporary_beside(target: Path) -> tuple[int, str]:
    """A new file beside `target` (its descriptor and path), never an existing one."""
    for _ in range(100):
        path = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(path, flags, 0o666), str(path)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")  # pragma: no cover


def check_report_path(path: str | os.PathLike[str], *, not_these: tuple[Path, ...] = ()) -> None:
    """Refuse, with a `ValueError` saying why, a report path that cannot be written:
    a name that is not .csv or .json, a missing or unwritable directory, a directory,
    or one of `not_these` (the input file, the store). Writes nothing that stays."""
    target = Path(path)
    if target.suffix.lower() not in (".csv", ".json"):
        raise ValueError(f"report {target}: use a .csv or .json file name")
    if target.is_dir():
        raise ValueError(f"report {target} is a directory: give a file name")
    for other in not_these:
        if _same_file(target, other):
            raise ValueError(f"report {target} is {other} itself: it would be overwritten")
    directory = target.parent
    if not directory.is_dir():
        raise ValueError(f"report {target}: the directory {directory} does not exist")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ValueError(f"report {target}: cannot write in {directory} ({exc.strerror})") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False
