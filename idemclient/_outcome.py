"""The result a caller receives: the `Outcome` of an operation, and its `State` (both
defined with the error tree, which they raise and which carries them), read from a
response or made from a stored record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ._errors import Outcome, State
from ._frozen import fast_constructor

if TYPE_CHECKING:
    import httpx

__all__ = [
    "OUTCOME",
    "UNFINISHED_STATES",
    "Outcome",
    "Recorded",
    "State",
    "from_record",
    "outcome_of",
    "seen_from_record",
]

#: Response extension carrying the `Outcome` of the operation a response answers.
OUTCOME = "idemclient.outcome"

UNFINISHED_STATES = tuple(s.value for s in State if not s.finished and s is not State.CHALLENGED)


class _KeptAnswer(Protocol):
    @property
    def body_omitted(self) -> bool: ...


class Recorded(Protocol):
    """What an `Outcome` is made from: the fields of a stored record it reads (the
    store's `OperationRecord` is one), so that the outcome knows no store."""

    @property
    def operation_id(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def state(self) -> State: ...
    @property
    def attempts(self) -> int: ...
    @property
    def evidence(self) -> str: ...
    @property
    def not_before(self) -> float | None: ...
    @property
    def maybe_applied(self) -> bool: ...
    @property
    def response(self) -> _KeptAnswer | None: ...


def outcome_of(response: httpx.Response) -> Outcome | None:
    """The `Outcome` of the operation `response` answers, from a client wrapped by
    `idemclient.wrap()` (or a `Client`'s `http`); None for a request that was not an
    operation (a GET, a method the policy leaves out)."""
    outcome = response.extensions.get(OUTCOME)
    return outcome if isinstance(outcome, Outcome) else None


def from_record(record: Recorded, **changes: Any) -> Outcome:
    """The `Outcome` an operation's stored record stands for, as the store has it
    (`from_store`, no response); `changes` are what the caller saw beyond the record
    (a response, other evidence...). Every outcome made from a record is made here (or
    by `seen_from_record`, with every field beyond the record given)."""
    fields: dict[str, Any] = {
        "operation_id": record.operation_id,
        "key": record.key,
        "state": record.state,
        "attempts": record.attempts,
        "evidence": record.evidence,
        "not_before": record.not_before,
        "maybe_applied": record.maybe_applied,
        "from_store": True,
        "body_omitted": record.response is not None and record.response.body_omitted,
    }
    # Built once with the changes (an unknown name is a TypeError, as for any call).
    fields.update(changes)
    return _new_outcome(**fields)


def seen_from_record(
    record: Recorded,
    response: httpx.Response | None,
    *,
    replayed: bool,
    from_store: bool,
    last_status: int | None,
    body_omitted: bool,
    existing: str | None,
    key_conflict: bool,
) -> Outcome:
    """`from_record(record, ...)` with every field beyond the record given, as a call
    that ends tells it: the same outcome, without a mapping of the fields built and
    unpacked for every operation."""
    return _new_outcome(
        record.operation_id,
        record.key,
        record.state,
        record.attempts,
        response,
        replayed,
        from_store,
        record.evidence,
        record.not_before,
        record.maybe_applied,
        last_status,
        body_omitted,
        existing,
        key_conflict,
    )


#: `Outcome(...)`, built without a call per field (see `_frozen`): every operation's.
_new_outcome = fast_constructor(Outcome)
