"""The states of an operation and the result a caller receives."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from ._store import OperationRecord


class State(enum.StrEnum):
    """Where an operation stands. Persisted as these strings."""

    #: recorded, not yet sent
    PENDING = "pending"
    #: an attempt holds the lease
    IN_FLIGHT = "in_flight"
    #: a final 2xx answer is stored
    SUCCEEDED = "succeeded"
    #: a final, non-retryable answer is stored (400, 401, 403, 404, 422, ...)
    FAILED = "failed"
    #: no attempt reached the server: safe to send again with the same key
    NOT_SENT = "not_sent"
    #: maybe applied, no final answer yet: resume or reconcile, never treat as failed
    INDETERMINATE = "indeterminate"
    #: the server asks for the request to be signed first (strong customer
    #: authentication); nothing applied. An outcome's state only: the store records
    #: such an operation `not_sent`
    CHALLENGED = "challenged"

    @property
    def finished(self) -> bool:
        """A final answer is stored; the operation is never sent again."""
        return self in _FINISHED


#: Response extension carrying the `Outcome` of the operation a response answers.
OUTCOME = "idemclient.outcome"

_FINISHED = frozenset({State.SUCCEEDED, State.FAILED})
UNFINISHED_STATES = tuple(
    s.value for s in State if s not in _FINISHED and s is not State.CHALLENGED
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one logical operation came to.

    `response` is the final answer when there is one (`succeeded` or `failed`). For an
    answer served from the local store without a network call, `from_store` is true
    and the body is the stored one. A body the store did not keep (over its
    `max_stored_body`, or reaped) is never given back empty: `body_omitted` is true,
    `response` has the status and headers, and reading its body raises
    `AnswerNotKept`. `replayed` is what the server said (`Idempotent-Replayed: true`):
    another attempt did the work.
    """

    operation_id: str
    key: str
    state: State
    attempts: int
    response: httpx.Response | None = None
    replayed: bool = False
    from_store: bool = False
    #: the last thing observed, in words (status line or error), for people and logs
    evidence: str = ""
    #: wall-clock time before which the server asked not to be retried (Retry-After)
    not_before: float | None = None
    #: whether any attempt may have reached the server and been applied
    maybe_applied: bool = False
    #: the HTTP status of the last answer seen, final or not (None if none arrived)
    last_status: int | None = None
    #: the final answer came from the store without its body (see `AnswerNotKept`)
    body_omitted: bool = False
    #: the id of the resource the server says this operation made, when it answered
    #: "already done, here it is" instead of replaying (GoCardless); `Client` fetches
    #: it, so `response` is the resource there
    existing: str | None = None
    #: the final answer is the server saying this key was used for another request
    #: (HTTP 422 in the IETF draft; each profile says how its server says it):
    #: `Client` raises `KeyConflict`
    key_conflict: bool = False

    @property
    def status_code(self) -> int | None:
        return None if self.response is None else self.response.status_code

    @property
    def succeeded(self) -> bool:
        return self.state is State.SUCCEEDED

    def json(self) -> Any:
        """The final answer's JSON body (`outcome.json()["id"]`).

        Raises `ValueError` when the operation has no final answer to read (it is not
        `succeeded` or `failed`), and `AnswerNotKept` when the store did not keep it.
        """
        if self.response is None:
            raise ValueError(
                f"operation {self.operation_id!r} is {self.state.value}: it has no final"
                " answer to read"
            )
        return self.response.json()


def outcome_of(response: httpx.Response) -> Outcome | None:
    """The `Outcome` of the operation `response` answers, from a client wrapped by
    `idemclient.wrap()` (or a `Client`'s `http`); None for a request that was not an
    operation (a GET, a method the policy leaves out)."""
    outcome = response.extensions.get(OUTCOME)
    return outcome if isinstance(outcome, Outcome) else None


def from_record(record: OperationRecord, **changes: Any) -> Outcome:
    """The `Outcome` an operation's stored record stands for, as the store has it
    (`from_store`, no response); `changes` are what the caller saw beyond the record
    (a response, other evidence...). Every outcome made from a record is made here."""
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
    return Outcome(**fields)
