"""What to do with each row, decided before anything is sent: pure functions.

For every row the store is asked what it knows (by the row's operation id, and for
rows recorded by earlier versions, by its reference), and `plan_row` decides:

- the store knows nothing of it: NEW, registered then sent with the row's key;
- the row, with other content: REFUSED, showing the old and the new values;
- the row, finished (succeeded, or failed for the payment's sake): DONE, its answer;
- the row, never applied: pending or not sent at another URL, or refused for its
  target (404, 405) at another URL, or for its credentials (401, 407) anywhere: REOPEN,
  the corrected request under the same key;
- the row, maybe applied at another URL: REFUSED, to be finished where it went;
- the row, unfinished, at this URL: KNOWN, its recorded request under its key.

NEW rows are looked up on the server first, and so are KNOWN and REOPEN rows whose
record is old (look-ups on).

"Old" is a record older than the server's key retention, or of unknown age (created in
the future by the clock's reckoning). A row recorded by an earlier version (its key from
the batch reference and the value date) is found by its reference: in no scope, the one
record with that reference is this row (more than one: refused, with how to scope
them); in a scope, the record whose earlier key this scope would have made, else one
with the very same content, else none.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .._call import fingerprint
from .._outcome import State
from .._store import NEVER_APPLIED_STATUSES, OperationRecord
from ._identity import RowIdentity, is_batch_operation

__all__ = [
    "SCOPE_ADVICE",
    "SERVER_FIELDS",
    "Request",
    "RowPlan",
    "Step",
    "differences",
    "legacy_candidates",
    "matches_payment",
    "past_retention",
    "plan_row",
    "recorded_payload",
]

#: Names a PSP sets on its own payments: never compared with a row's columns.
SERVER_FIELDS = frozenset({"id", "object", "status", "created", "idempotency_key", "external"})

SCOPE_ADVICE = (
    "a known reference is never paid again under other content: a new payment needs a"
    " new reference. If references repeat across files (an employee id every month),"
    " give each file its own scope with --batch-ref (batch_reference= from Python),"
    " e.g. --batch-ref 2026-12; the server then sees <scope>/<reference>"
)

#: Credentials refused: the token is not stored, so it may have been fixed since.
_CREDENTIALS = frozenset({401, 407})


class Step(enum.Enum):
    #: the store does not know the row: register it, then send it with its key
    NEW = "new"
    #: unfinished: send its recorded request with its recorded key
    KNOWN = "known"
    #: finished: its recorded answer stands; nothing is sent
    DONE = "done"
    #: never applied where it went: point it at this run's request, same key, and send
    REOPEN = "reopen"
    #: refused before anything is sent
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Request:
    """The request this run would send for a row."""

    url: str
    body: bytes
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RowPlan:
    step: Step
    #: what the store holds for the row (None for NEW)
    record: OperationRecord | None = None
    #: look the reference up on the server before anything is sent
    look_up: bool = False
    #: in words: why it is refused, or why it is reopened
    why: str = ""


#: Most rows of a new file: one plan shared by all of them.
_NEW = RowPlan(Step.NEW)
_NEW_LOOKED_UP = RowPlan(Step.NEW, look_up=True)


def recorded_payload(record: OperationRecord) -> dict[str, Any] | None:
    """The JSON object a record was sent with; None when its body was not kept."""
    try:
        body = json.loads(record.body) if record.body else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Each column whose value changed, as ``name: old -> new``; the reference is the
    identity, not the content, and is left out."""
    changed = []
    for name in sorted(set(before) | set(after), key=lambda n: (n not in after, n)):
        if name == "reference":
            continue
        old, new = before.get(name, _ABSENT), after.get(name, _ABSENT)
        if old != new:
            changed.append(f"{name} {_shown(old)} -> {_shown(new)}")
    return changed


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


_ABSENT: Any = _Absent()


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def matches_payment(payload: Mapping[str, Any], payment: Mapping[str, Any]) -> bool:
    """Whether a payment the server holds has this row's content: the same amount and
    currency (both must be shown), and the same value for every other column of the row
    that the payment shows too."""
    if any(name not in payment for name in ("amount", "currency")):
        return False
    return all(
        payment[name] == value
        for name, value in payload.items()
        if name in payment and name not in SERVER_FIELDS
    )


def past_retention(record: OperationRecord, *, now: float, retention: float) -> bool:
    """Older than the server's key retention, or of unknown age: a record dated after
    `now` (the clock went back, or was fast when it was written) may be any age."""
    return record.created_at > now or now - record.created_at > retention


def legacy_candidates(
    records: Iterable[OperationRecord], identity: RowIdentity
) -> list[OperationRecord]:
    """The records an earlier version of the batch command made that may be this row:
    keyed by operation id = key, POSTed with the row's own reference."""
    return [
        record
        for record in records
        if record.reference == identity.bare
        and record.operation_id == record.key
        and not is_batch_operation(record.operation_id)
        and record.method == "POST"
    ]


def _same_content(record: OperationRecord, request: Request) -> bool | None:
    """Whether `record` was sent with `request`'s content (None: cannot tell)."""
    recorded = recorded_payload(record)
    if recorded is not None:
        return not differences(recorded, request.payload)
    if record.body:
        return None
    # The body was reaped: its fingerprint, taken with the record's own path, still says.
    return fingerprint("POST", httpx.URL(record.url), request.body) == record.fingerprint


def _adopted(
    identity: RowIdentity,
    scope: str | None,
    legacy: Sequence[OperationRecord],
    legacy_key: str | None,
    request: Request,
) -> OperationRecord | str | None:
    """The earlier version's record that is this row, a refusal, or None."""
    if not legacy:
        return None
    if scope is not None:
        exact = [r for r in legacy if r.key == legacy_key]
        if exact:
            return exact[0]
        same = [r for r in legacy if _same_content(r, request)]
        if len(same) > 1:
            return (
                f"reference {identity.bare!r} was paid {len(same)} times with this content"
                " by an earlier version; settle it by hand before submitting it again"
            )
        # Records with other content belong to other scopes (other months).
        return same[0] if same else None
    if len(legacy) == 1:
        return legacy[0]
    same = [r for r in legacy if _same_content(r, request)]
    if len(same) == 1:
        return same[0]
    return (
        f"reference {identity.bare!r} is recorded {len(legacy)} times in the store, by"
        " earlier files in which it repeated: give this file a scope with --batch-ref"
    )


def plan_row(
    identity: RowIdentity,
    request_of: Callable[[], Request],
    *,
    known: OperationRecord | None,
    legacy: Sequence[OperationRecord] = (),
    scope: str | None = None,
    legacy_key: str | None = None,
    now: float,
    retention: float,
    look_up: bool = True,
) -> RowPlan:
    """What to do with one row (see the module docstring). `request_of()` makes the
    request this run would send for it (only needed, and so only made, when the store
    knows something of the row); `known` is the store's record under the row's
    operation id, `legacy` the earlier version's records with its reference
    (`legacy_candidates`); `look_up` says whether look-ups are on."""
    if known is None and not legacy:
        return _NEW_LOOKED_UP if look_up else _NEW
    request = request_of()
    record: OperationRecord | None = known
    if record is None:
        adopted = _adopted(identity, scope, legacy, legacy_key, request)
        if isinstance(adopted, str):
            return RowPlan(Step.REFUSED, why=adopted)
        record = adopted
    if record is None:
        return _NEW_LOOKED_UP if look_up else _NEW
    same = _same_content(record, request)
    if same is not True:
        recorded = recorded_payload(record)
        if recorded is None:
            why = (
                "was submitted before with other content (its recorded body was not kept,"
                " so the old values cannot be shown: its fingerprint differs)"
            )
        else:
            why = "was submitted before with other content: " + "; ".join(
                differences(recorded, request.payload)
            )
        return RowPlan(Step.REFUSED, record, why=why)
    old = look_up and past_retention(record, now=now, retention=retention)
    moved = record.url != request.url
    never_applied = not record.maybe_applied and record.lease_owner is None
    status = record.response.status_code if record.response is not None else None
    if record.state.finished:
        refused_for_target = (
            record.state is State.FAILED
            and never_applied
            and status in NEVER_APPLIED_STATUSES
            and (moved or status in _CREDENTIALS)
        )
        if refused_for_target:
            return RowPlan(
                Step.REOPEN,
                record,
                look_up=old,
                why=f"refused with HTTP {status} at {record.url}, never applied",
            )
        return RowPlan(Step.DONE, record)
    if moved:
        if never_applied and record.state in (State.PENDING, State.NOT_SENT):
            return RowPlan(
                Step.REOPEN,
                record,
                look_up=old,
                why=f"recorded for {record.url}, never applied there",
            )
        return RowPlan(
            Step.REFUSED,
            record,
            why=(
                f"was sent to {record.url} and may have been applied there"
                f" ({record.state.value}): finish it there (the same --url and --path), or"
                f" settle it with idemclient ops reconcile {record.operation_id}"
            ),
        )
    return RowPlan(Step.KNOWN, record, look_up=old)
