"""What a batch run came to: one line per row, a summary, and the exit code."""

from __future__ import annotations

import csv
import enum
import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .._outcome import Outcome, State

__all__ = ["ExitCode", "Report", "ReportRow"]


class ExitCode(enum.IntEnum):
    """What the `idemclient batch submit` command exits with."""

    #: every row succeeded (now or in an earlier run)
    OK = 0
    #: the file was refused: nothing was recorded or sent
    BAD_INPUT = 2
    #: some rows are indeterminate or not sent yet: run the same command again
    RUN_AGAIN = 3
    #: some rows got a final refusal from the server (and none is left to run again)
    FAILED = 4


@dataclass(frozen=True, slots=True)
class ReportRow:
    row: int
    ref: str
    key: str
    state: str
    http_status: int | None
    resource_id: str | None
    attempts: int
    replayed: bool

    @classmethod
    def of(cls, row: int, ref: str, outcome: Outcome) -> ReportRow:
        return cls(
            row=row,
            ref=ref,
            key=outcome.key,
            state=outcome.state.value,
            http_status=outcome.last_status,
            resource_id=_resource_id(outcome),
            attempts=outcome.attempts,
            replayed=outcome.replayed or outcome.from_store,
        )


def _resource_id(outcome: Outcome) -> str | None:
    response = outcome.response
    if response is None or not response.content:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    value = body.get("id") if isinstance(body, dict) else None
    return str(value) if value is not None else None


REPORT_COLUMNS = tuple(f.name for f in fields(ReportRow))


@dataclass(frozen=True, slots=True)
class Report:
    batch: str
    rows: tuple[ReportRow, ...]

    def counts(self) -> Counter[str]:
        counts: Counter[str] = Counter(row.state for row in self.rows)
        counts["replayed"] = sum(row.replayed for row in self.rows)
        return counts

    @property
    def exit_code(self) -> ExitCode:
        states = {row.state for row in self.rows}
        unsettled = {State.NOT_SENT, State.INDETERMINATE, State.PENDING, State.IN_FLIGHT}
        if states & {s.value for s in unsettled}:
            return ExitCode.RUN_AGAIN
        if State.FAILED.value in states:
            return ExitCode.FAILED
        return ExitCode.OK

    def summary(self) -> str:
        counts = self.counts()
        parts = [f"{len(self.rows)} rows"]
        for name in ("succeeded", "replayed", "indeterminate", "not_sent", "failed"):
            parts.append(f"{counts.get(name, 0)} {name.replace('_', ' ')}")
        advice = {
            ExitCode.OK: "every row is done",
            ExitCode.RUN_AGAIN: "some rows are unsettled: run the same command again",
            ExitCode.FAILED: "some rows were refused by the server: see the report",
        }[self.exit_code]
        return f"batch {self.batch}: " + ", ".join(parts) + f". {advice}."

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the report as CSV or JSON, chosen by the file's extension."""
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".json":
            target.write_text(json.dumps([asdict(r) for r in self.rows], indent=2) + "\n")
        elif suffix == ".csv":
            with target.open("w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS)
                writer.writeheader()
                for row in self.rows:
                    writer.writerow(asdict(row))
        else:
            raise ValueError(f"report {target}: use a .csv or .json file name")
