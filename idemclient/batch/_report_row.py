"""One line of a batch's report (`ReportRow`): a row's state, its answer, and the
server's own words on what was wrong (`refusal_of`), read from the dialects payment
APIs speak."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from .. import Outcome, State

__all__ = ["MAX_REFUSAL", "REPORT_COLUMNS", "UNSETTLED", "ReportRow", "refusal_of", "resource_id"]


_CREDENTIALS = frozenset({401, 407})
UNSETTLED = frozenset(
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
        return self.state in UNSETTLED and self.http_status in _CREDENTIALS

    @property
    def maybe_applied(self) -> bool:
        """Unsettled, and may have been applied (indeterminate, or in flight)."""
        return self.state in UNSETTLED and self.state not in _NOT_APPLIED


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
#: `message` and its `details[].description`, `errors[].message`; a decline answered in
#: a 2xx: Adyen's `refusalReason`, Checkout.com's `response_summary`.
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
    ("refusalReason",),
    ("response_summary",),
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
