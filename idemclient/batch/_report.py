"""What a batch run came to: one line per row (`_report_row`), a summary, the exit code,
and the file (`_report_file`: checked before anything is sent, written atomically). A
JSON report holds the batch's metadata, the summary and the rows.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import enum
import json
import math
import os
import signal
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .. import Outcome, State
from .._errors import BatchInvalid
from .._seam import Verdict, shown_url
from ..store import OperationRecord
from ._lookup import Asked, Trouble
from ._matching import SERVER_FIELDS
from ._report_file import check_report_path, csv_cell, replace_atomically
from ._report_row import REPORT_COLUMNS, UNSETTLED, ReportRow, refusal_of, resource_id
from ._run_rows import RunRow

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
    #: held before anything was sent: rows whose payment the store holds under another
    #: reference (a file re-saved by a spreadsheet); the operator's word is awaited
    HELD = 6
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


@dataclass(frozen=True, slots=True)
class _Tally:
    """What the summary and the exit code read of a report's rows, counted in one pass
    over them (the rows of a large batch are read back from disk: see `_lines`)."""

    counts: Counter[str]
    credentials_refused: int
    credentials_refused_maybe_applied: int
    to_reconcile: int
    #: the states of the rows a rerun can settle (every row but those to reconcile)
    states: frozenset[str]

    @classmethod
    def of(cls, rows: Iterable[ReportRow]) -> _Tally:
        counts: Counter[str] = Counter()
        refused = refused_maybe = reconcile = 0
        states: set[str] = set()
        for row in rows:
            counts[row.state] += 1
            counts["replayed"] += row.replayed
            counts["already_done"] += row.already_done
            if row.already_done and row.state in _EARLIER:
                counts[f"{row.state}_already_done"] += 1
            if row.credentials_refused:
                if row.maybe_applied:
                    refused_maybe += 1
                else:
                    refused += 1
            if row.reconcile:
                reconcile += 1
            else:
                states.add(row.state)
        counts["reconcile"] = reconcile
        for state in _EARLIER:
            counts[f"{state}_already_done"] += 0
        return cls(counts, refused, refused_maybe, reconcile, frozenset(states))


#: States whose rows the summary says were done before this run.
_EARLIER = (State.SUCCEEDED.value, State.FAILED.value)


@dataclass(frozen=True, slots=True)
class Report:
    """A batch run's outcome. `batch` names it in the summary (its scope, or its file);
    `metadata` goes into a JSON report; `notes` are sentences added to the summary;
    `interrupted`: the run was stopped before every row was done, by `signal` (the
    signal's number; None: Ctrl-C, or a caller's `stop()`); `refused`: the batch was
    refused before anything was sent (the rows' reasons say why). `rows` may be read
    from disk a page at a time (the command's, for a large batch): they are read once
    for the counts, and once more each time the report is written."""

    batch: str
    rows: Sequence[ReportRow]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    interrupted: bool = False
    refused: bool = False
    signal: int | None = None
    #: refused only for rows held as payments made under another reference (`_resave`)
    held: bool = False
    _tally: _Tally | None = field(default=None, init=False, repr=False, compare=False)

    def _tallied(self) -> _Tally:
        if self._tally is None:
            object.__setattr__(self, "_tally", _Tally.of(self.rows))
        assert self._tally is not None
        return self._tally

    def counts(self) -> Counter[str]:
        return Counter(self._tallied().counts)

    @property
    def credentials_refused(self) -> int:
        """Rows the server refused the credentials for, and of which nothing can have
        been applied: the same command with the right token sends them."""
        return self._tallied().credentials_refused

    @property
    def credentials_refused_maybe_applied(self) -> int:
        """Rows the server refused the credentials for after an attempt that may have
        been applied (a lost answer, then a 401): unsettled, to be run again."""
        return self._tallied().credentials_refused_maybe_applied

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return _BY_SIGNAL.get(self.signal or 0, ExitCode.INTERRUPTED)
        if self.refused and self.held:
            return ExitCode.HELD
        if self.refused or self.credentials_refused:
            return ExitCode.BAD_INPUT
        # A row a rerun cannot settle is not a reason to run again: it would loop.
        states = self._tallied().states
        if states & UNSETTLED:
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
        return self._tallied().to_reconcile

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
            ExitCode.HELD: (
                "held before anything was sent: some rows are the same payment as rows the"
                " store holds under other references (a re-saved file?); see each one (in"
                " the errors, and the report's reasons); a new payment is said with"
                " --new-payment REF, or --new-payments for the file"
            ),
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

    def materialized(self) -> Report:
        """This report with its rows in memory (a tuple), to outlive the run that made
        it."""
        if isinstance(self.rows, tuple):
            return self
        return dataclasses.replace(self, rows=tuple(self.rows))

    def batch_document(self) -> dict[str, Any]:
        """The JSON report's `batch`: metadata, exit code, counts and summary."""
        counts = self.counts()
        return {
            **self.metadata,
            "interrupted": self.interrupted,
            "signal": None if self.signal is None else signal.Signals(self.signal).name,
            "refused": self.refused,
            "held": self.held,
            "exit_code": int(self.exit_code),
            "counts": {name: counts.get(name, 0) for name in _COUNTED},
            "summary": self.summary(),
        }

    def document(self) -> dict[str, Any]:
        """The JSON report: metadata, summary and rows."""
        return {"batch": self.batch_document(), "rows": [asdict(row) for row in self.rows]}

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the report as CSV or JSON, chosen by the file's extension, atomically:
        the file is whole, or as it was. Written a row at a time: a large batch's
        report is never held whole in memory."""
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".json":
            replace_atomically(target, self._write_json)
        elif suffix == ".csv":
            replace_atomically(target, self._write_csv)
        else:
            raise ValueError(f"report {target}: use a .csv or .json file name")

    def _write_csv(self, out: TextIO) -> None:
        writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS)
        writer.writeheader()
        for row in self.rows:
            writer.writerow({name: csv_cell(value) for name, value in asdict(row).items()})

    def _write_json(self, out: TextIO) -> None:
        """`json.dumps(self.document(), indent=2)`, byte for byte, a row at a time."""
        batch = json.dumps(self.batch_document(), indent=2).replace("\n", "\n  ")
        out.write('{\n  "batch": ' + batch + ',\n  "rows": [')
        first = True
        for row in self.rows:
            shown = json.dumps(asdict(row), indent=2).replace("\n", "\n    ")
            out.write(("\n    " if first else ",\n    ") + shown)
            first = False
        out.write("]\n}\n" if first else "\n  ]\n}\n")


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


# -- the words of each row's line ----------------------------------------------------


#: Answers that are about the credentials, not the row: stop starting new rows.
_REFUSED_CREDENTIALS = frozenset({401, 407})


def refusal_reasons(refused: BatchInvalid) -> dict[int, str]:
    """Each row's reasons for a refusal, by row number (the file's own are left out)."""
    found: dict[int, list[str]] = defaultdict(list)
    for number, why in refused.problems:
        if number:
            found[number].append(why)
    return {number: "; ".join(whys) for number, whys in found.items()}


def report_line(
    item: RunRow,
    *,
    key: str,
    state: State,
    status: int | None,
    resource: str | None,
    replayed: bool,
    reason: str,
    attempts: int = 0,
) -> ReportRow:
    """A report line; `replayed`: its answer was there before this run (the store's,
    a look-up's), nothing was sent for it now: it is already done, not a replay."""
    return ReportRow(
        row=item.row.number,
        ref=item.identity.reference,
        key=key,
        state=state.value,
        http_status=status,
        resource_id=resource,
        attempts=attempts,
        replayed=False,
        reason=reason,
        already_done=replayed,
    )


#: How the evidence of a row settled by a look-up begins (`_reconcile.apply`, and
#: `_recording.Recording._record_found`).
FOUND_EVIDENCE = ("settled by look-up", "found by look-up")


def recorded_line(
    item: RunRow,
    record: OperationRecord | None,
    *,
    key: str | None = None,
    reason: str = "",
    replayed: bool = True,
) -> ReportRow:
    """A row as the store has it (not sent, when it has nothing), without sending."""
    if record is None:
        return report_line(
            item,
            key=key or item.identity.key,
            state=State.NOT_SENT,
            status=None,
            resource=None,
            replayed=False,
            reason=reason,
        )
    response = record.response
    state = State.NOT_SENT if record.state is State.PENDING else record.state
    if not reason and state.finished and record.evidence.startswith(FOUND_EVIDENCE):
        reason = (
            "already done: answered from the store (found on the server by look-up in an"
            " earlier run)"
        )
    elif not reason:
        reason = {
            State.SUCCEEDED: "already done: answered from the store (done in an earlier run)",
            State.FAILED: f"refused in an earlier run ({record.evidence}"
            f"{server_said(None if response is None else response.body)})",
        }.get(state, f"{state.words} in the store, being sent elsewhere: run again")
    return report_line(
        item,
        key=record.key,
        state=state,
        status=None if response is None else response.status_code,
        resource=None if response is None else resource_id(response.body),
        replayed=replayed and state.finished,
        reason=reason,
        attempts=record.attempts,
    )


def changed_line(item: RunRow, record: OperationRecord | None) -> ReportRow:
    """A known row the store holds otherwise than when the run planned it (another
    process purged or moved it): not sent by this run."""
    return recorded_line(
        item,
        record,
        key=item.identity.key if record is None else record.key,
        reason="not sent: changed in the store while this run went; run the same command again",
        replayed=False,
    )


def unsettled_line(item: RunRow, key: str, verdict: Verdict) -> ReportRow:
    """A row found on the server whose payment is not final yet: not sent."""
    return report_line(
        item,
        key=key,
        state=State.INDETERMINATE,
        status=None,
        resource=found_id(verdict),
        replayed=False,
        reason=f"found on the server, not final yet ({verdict.why}): not sent; run again"
        " later to settle it",
    )


def found_reason(verdict: Verdict) -> str:
    return f"found on the server by look-up, not sent ({verdict.why})"


def found_id(verdict: Verdict) -> str | None:
    item = verdict.item
    value = None if item is None else item.get("id")
    return None if value is None else str(value)


def server_said(content: bytes | None) -> str:
    """What the server's answer says was wrong, after a colon (nothing if it says
    nothing readable)."""
    refusal = refusal_of(content)
    return f": {refusal}" if refusal else ""


def evidence_after(outcome: Outcome) -> str:
    """The outcome's evidence, after what was said already (nothing when it has none)."""
    return f"; {outcome.evidence}" if outcome.evidence else ""


def evidence_in_parens(outcome: Outcome) -> str:
    """The outcome's evidence in parentheses, or nothing when it has none."""
    return f" ({outcome.evidence})" if outcome.evidence else ""


def reason_of(outcome: Outcome, *, budget: bool) -> str:
    state = outcome.state
    if budget and not state.finished:
        then = "may have been applied" if outcome.maybe_applied else "not applied"
        return f"stopped by the retry budget: {then}; run again{evidence_in_parens(outcome)}"
    if state is State.SUCCEEDED:
        if outcome.from_store:
            return "already done: answered from the store (done in an earlier run)"
        if outcome.replayed:
            return "answered by the server from an earlier attempt under the same key"
        return "sent now"
    if state is State.FAILED:
        earlier = " in an earlier run" if outcome.from_store else ""
        said = server_said(outcome.response.content if outcome.response is not None else None)
        if said:  # the server's own words on what was wrong
            return f"refused by the server{earlier} ({outcome.evidence or 'refused'}{said})"
        return f"refused by the server{earlier}{evidence_in_parens(outcome)}"
    if outcome.last_status in _REFUSED_CREDENTIALS:
        return (
            f"the server refused the credentials (HTTP {outcome.last_status}): check the"
            " token; not applied"
            if not outcome.maybe_applied
            else f"the server refused the credentials (HTTP {outcome.last_status}) after an"
            " attempt that may have been applied: check the token, then run again"
        )
    if state is State.INDETERMINATE:
        return f"may have been applied{evidence_in_parens(outcome)}: run again"
    if state is State.IN_FLIGHT:
        return f"being sent by another caller{evidence_in_parens(outcome)}: run again"
    return f"not sent{evidence_in_parens(outcome)}: run again"


def conflict_with(item: RunRow, asked: Asked, payload: Mapping[str, object]) -> str:
    """Why a row's reference the server holds with other content refuses the batch:
    what differs, field by field, between the row (`payload`) and what was found."""
    verdict = asked.verdict
    reference = item.identity.reference
    if verdict.finding == "ambiguous":
        return (
            f"reference {reference!r}: the server holds {len(verdict.others)} payments with"
            f" this content (GET {shown_url(asked.url)}); settle it by hand before submitting it"
        )
    shown = []
    for payment in verdict.others[:3]:
        diffs = [
            f"{name} {shown_value(value)} here, {shown_value(payment.get(name))} there"
            for name, value in payload.items()
            if name not in SERVER_FIELDS
            and name != "reference"
            and (name in ("amount", "currency") or name in payment)
            and payment.get(name) != value
        ]
        name = payment.get("id", "a payment")
        shown.append(f"{name}: " + ("; ".join(diffs) or "content not shown"))
    return (
        f"reference {reference!r} is already on the server with other content (GET"
        f" {shown_url(asked.url)}): " + " | ".join(shown)
    )


def shown_value(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def not_working(asked: Asked) -> str:
    """Why the batch is refused for a look-up that does not work, and what to do
    (see `Trouble`): only where there is no such look-up here is going without one
    said to be a way, and never for refused credentials."""
    got = f"GET {shown_url(asked.url)} got {asked.verdict.why}"
    if asked.trouble is Trouble.CREDENTIALS:
        status = asked.response.status_code if asked.response is not None else 401
        return (
            f"the server refused the credentials (HTTP {status}) when asked GET"
            f" {shown_url(asked.url)}: check the token (--token or IDEMCLIENT_TOKEN)."
            " Nothing was sent"
        )
    if asked.trouble is Trouble.ABSENT:
        return (
            f"the look-up does not work: {got}. Nothing was sent. Check --url,"
            " --path and --lookup; where the server offers no look-up at all, --no-lookup"
            " sends without one (read what it risks in its help)"
        )
    if asked.trouble is Trouble.REFUSED:
        return (
            f"the look-up does not work: {got}. Nothing was sent. Check --url,"
            " --path and --lookup, and that the token may list payments"
        )
    return f"the look-up does not work: {got}. Nothing was sent"


def whole_seconds(value: float) -> str:
    """A wait in whole seconds, rounded up: a wait is never said shorter than it is."""
    return str(max(1, math.ceil(value)))


def utc_text(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
