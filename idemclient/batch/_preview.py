"""`batch submit --dry-run`: what a run would do with each row, from the file and the
store alone.

Only the first phase of a run (`_run`, plan) is done: the file is read and checked, and
the store is asked what it knows of each row. Nothing is looked up on the server,
registered in the store or sent. A batch the run would refuse is refused the same way
(`BatchInvalid`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Unpack

import httpx

from .._clock import Clock
from .._policy import RetryPolicy
from .._profile import Profile
from .._store import Store
from ..profiles import DEFAULT as DEFAULT_PROFILE
from ._plan import Step
from ._rows import Batch
from ._run import SubmitOptions, run_on
from ._sender import target_of

__all__ = ["Preview", "PreviewRow", "preview"]

#: What each step means for the row, in words.
_WHAT = {
    Step.NEW: "new to the store: would be registered and sent",
    Step.KNOWN: "unfinished in the store: its recorded request would be sent again, same key",
    Step.DONE: "finished in the store: nothing would be sent",
    Step.REOPEN: "never applied where it went: would be sent here, same key",
    Step.ELSEWHERE: "finished at another origin: would be looked up here, not sent",
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


@dataclass(frozen=True, slots=True)
class Preview:
    rows: tuple[PreviewRow, ...]

    def counts(self) -> Counter[str]:
        return Counter(row.step for row in self.rows)

    def summary(self) -> str:
        counts = self.counts()
        sent = sum(1 for row in self.rows if row.method is not None)
        looked_up = sum(1 for row in self.rows if row.look_up)
        parts = ", ".join(f"{counts.get(s.value, 0)} {s.value}" for s in _WHAT)
        lookups = (
            f", {looked_up} looked up first (a payment found is not sent)" if looked_up else ""
        )
        return (
            f"dry run: {len(self.rows)} rows ({parts}); {sent} would be sent{lookups}."
            " Nothing was looked up, recorded or sent."
        )

    def document(self, *, bodies: bool = True) -> dict[str, Any]:
        """The preview as JSON. `bodies=False`: each row's request body (account
        numbers, names, amounts) is null, as the text shows it only with --verbose."""
        rows = [asdict(row) for row in self.rows]
        if not bodies:
            for row in rows:
                row["body"] = None
        return {
            "dry_run": True,
            "bodies": bodies,
            "counts": {step.value: self.counts().get(step.value, 0) for step in _WHAT},
            "summary": self.summary(),
            "rows": rows,
        }


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
    builds requests (its base URL and credentials), it sends none."""
    run = run_on(
        batch, store=store, clock=clock, policy=policy, http=http, profile=profile, **options
    )
    run.plan()
    shown = []
    for item in run.rows:
        plan, identity = item.plan, item.identity
        record = plan.record
        method = url = body = None
        if plan.step in (Step.NEW, Step.REOPEN):
            request = run.request_of(item.row, identity)
            method, url, body = "POST", request.url, request.body.decode("utf-8", "replace")
        elif plan.step is Step.KNOWN and record is not None:
            method, url = record.method, target_of(record.url)
            body = record.body.decode("utf-8", "replace")
        shown.append(
            PreviewRow(
                row=item.row.number,
                reference=identity.reference,
                step=plan.step.value,
                action=_WHAT[plan.step] + (f" ({plan.why})" if plan.why else ""),
                key=record.key if record is not None else identity.key,
                stored_state=record.state.value if record is not None else None,
                stored_attempts=record.attempts if record is not None else 0,
                look_up=plan.look_up,
                method=method,
                url=url,
                body=body,
            )
        )
    return Preview(tuple(shown))
