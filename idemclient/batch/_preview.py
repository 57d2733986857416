"""`batch submit --dry-run`: what a run would do with each row, from the file and the
store alone.

Only the first phase of a run (`_run`, plan) is done: the file is read and checked, and
the store is asked what it knows of each row. Nothing is looked up on the server,
registered in the store or sent. A batch the run would refuse is refused the same way
(`BatchInvalid`). The rows are shown a chunk at a time, planned again as they are
shown: a preview of a million rows holds one chunk of them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, TextIO, Unpack

import httpx

from ..clock import Clock
from ..policy import RetryPolicy
from ..profiles import DEFAULT as DEFAULT_PROFILE
from ..profiles import Profile
from ..store import Store
from ._plan import RowAction
from ._rows import Batch
from ._run import SubmitOptions, _Run, run_on
from ._run_rows import RunRow
from ._sender import target_of

__all__ = ["Preview", "PreviewRow", "preview"]

#: What each decision means for the row, in words.
_WHAT = {
    RowAction.NEW: "new to the store: would be registered and sent",
    RowAction.KNOWN: "unfinished in the store: its recorded request would be sent again, same key",
    RowAction.DONE: "finished in the store: nothing would be sent",
    RowAction.REOPEN: "never applied where it went: would be sent here, same key",
    RowAction.ELSEWHERE: "finished at another origin: would be looked up here, not sent",
}


@dataclass(frozen=True, slots=True)
class PreviewRow:
    row: int
    reference: str
    #: new, known, done, reopen, elsewhere
    step: str
    #: what the run would do, in words
    action: str
    #: the operation's key (the store's, when it knows the row)
    key: str
    #: the store's state of the row, or None when it does not know it
    stored_state: str | None
    stored_attempts: int
    #: it would be looked up on the server first
    look_up: bool
    #: what would be sent (None: nothing)
    method: str | None
    url: str | None
    body: str | None


class Preview:
    """What a run would do with each row: `rows` (planned again each time they are
    read, a chunk at a time), and the counts of the plan."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self.total = len(run.batch.rows)
        decisions = run.decisions
        self._counts: Counter[str] = Counter({s.value: decisions.get(s.value, 0) for s in _WHAT})
        self.looked_up = decisions.get("looked up", 0)

    @property
    def rows(self) -> Iterator[PreviewRow]:
        for item in self._run.each_planned():
            yield _shown(self._run, item)

    def counts(self) -> Counter[str]:
        return Counter(self._counts)

    def summary(self) -> str:
        counts = self._counts
        sent = (
            counts[RowAction.NEW.value]
            + counts[RowAction.REOPEN.value]
            + counts[RowAction.KNOWN.value]
        )
        parts = ", ".join(f"{counts.get(s.value, 0)} {s.value}" for s in _WHAT)
        looked_up = self.looked_up
        lookups = (
            f", {looked_up} looked up first (a payment found is not sent)" if looked_up else ""
        )
        return (
            f"dry run: {self.total} rows ({parts}); {sent} would be sent{lookups}."
            " Nothing was looked up, recorded or sent."
        )

    def head(self, *, bodies: bool = True) -> dict[str, Any]:
        """The preview's JSON but its rows."""
        return {
            "dry_run": True,
            "bodies": bodies,
            "counts": {step.value: self._counts.get(step.value, 0) for step in _WHAT},
            "summary": self.summary(),
        }

    def document(self, *, bodies: bool = True) -> dict[str, Any]:
        """The preview as JSON. `bodies=False`: each row's request body (account
        numbers, names, amounts) is null, as the text shows it only with --verbose."""
        return {**self.head(bodies=bodies), "rows": [_row(r, bodies) for r in self.rows]}

    def write_json(self, out: TextIO, *, bodies: bool = True) -> None:
        """`json.dumps(self.document(bodies=bodies), indent=2)`, a row at a time."""
        head = json.dumps(self.head(bodies=bodies), indent=2, ensure_ascii=False)
        out.write(head[:-2] + ',\n  "rows": [')
        first = True
        for row in self.rows:
            shown = json.dumps(_row(row, bodies), indent=2, ensure_ascii=False)
            out.write(("\n    " if first else ",\n    ") + shown.replace("\n", "\n    "))
            first = False
        out.write("]\n}\n" if first else "\n  ]\n}\n")


def _row(row: PreviewRow, bodies: bool) -> dict[str, Any]:
    shown = asdict(row)
    if not bodies:
        shown["body"] = None
    return shown


def preview(
    batch: Batch,
    *,
    store: Store,
    clock: Clock,
    policy: RetryPolicy,
    http: httpx.Client,
    profile: Profile = DEFAULT_PROFILE,
    **options: Unpack[SubmitOptions],
) -> Preview:
    """What a run of `batch` would do, row by row, reading `store` only; `http` only
    builds requests (its base URL and credentials), it sends none. The preview reads
    the store as it is read: use it while the store is open."""
    run = run_on(
        batch, store=store, clock=clock, policy=policy, http=http, profile=profile, **options
    )
    try:
        run.plan()
    finally:
        run.close()  # its report lines: a preview has none
    return Preview(run)


def _shown(run: _Run, item: RunRow) -> PreviewRow:
    plan, identity = item.plan, item.identity
    record = plan.record
    method = url = body = None
    if plan.decision in (RowAction.NEW, RowAction.REOPEN):
        request = run.request_of(item.row, identity)
        method, url, body = "POST", request.url, request.body.decode("utf-8", "replace")
    elif plan.decision is RowAction.KNOWN and record is not None:
        method, url = record.method, target_of(record.url)
        body = record.body.decode("utf-8", "replace")
    return PreviewRow(
        row=item.row.number,
        reference=identity.reference,
        step=plan.decision.value,
        action=_WHAT[plan.decision] + (f" ({plan.why})" if plan.why else ""),
        key=record.key if record is not None else identity.key,
        stored_state=record.state.value if record is not None else None,
        stored_attempts=record.attempts if record is not None else 0,
        look_up=plan.look_up,
        method=method,
        url=url,
        body=body,
    )
