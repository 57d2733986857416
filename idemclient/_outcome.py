"""The states of an operation and the result a caller receives."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ._errors import (
    ChallengeRequired,
    Indeterminate,
    KeyConflict,
    NotSent,
    OperationFailed,
    OutcomeError,
)

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

    @property
    def words(self) -> str:
        """The state as people read it in a message ("not sent", "in flight")."""
        return self.value.replace("_", " ")


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

    def raise_for_status(self) -> Outcome:
        """Return this outcome if the operation succeeded; raise otherwise.

        As httpx's `Response.raise_for_status()`, for an operation: a final refusal
        (a declined card's 402, a 400...) raises `OperationFailed` (`KeyConflict` for a
        key the server holds for another request); an operation with no final answer
        raises what the client raises for it: `Indeterminate` (maybe applied: never
        treat it as failed) or `NotSent` (`ChallengeRequired` where the server asks for
        a signature). The error carries this outcome. Returning the outcome lets a call
        chain: ``client.post(...).raise_for_status().json()["id"]``.
        """
        if self.state is State.SUCCEEDED:
            return self
        raise self._error()

    def _error(self) -> OutcomeError:
        named = f"operation {self.operation_id!r} (key {self.key})"
        status = "" if self.last_status is None else f" (HTTP {self.last_status})"
        if self.state is State.FAILED:
            if self.key_conflict:
                return KeyConflict(
                    f"{named} failed{status}: the server holds this key for a different"
                    " request. This is a bug in the caller: a key must never be reused"
                    " for another request.",
                    self,
                )
            return OperationFailed(
                f"{named} failed: the server's final answer is {self.evidence or status}."
                " It is final: sending it again under this key gets the same answer.",
                self,
            )
        if self.state is State.CHALLENGED:
            return ChallengeRequired(
                f"{named} is challenged{status}: the server asks for the request to be"
                " signed first (outcome.response holds the challenge); nothing was applied.",
                self,
            )
        seen = f"; last seen: {self.evidence}" if self.evidence else ""
        if self.state in (State.NOT_SENT, State.PENDING) and not self.maybe_applied:
            return NotSent(
                f"{named} is {self.state.words} after {self.attempts} attempt(s){seen}."
                " Nothing of it was applied; safe to send again with the same key.",
                self,
            )
        return Indeterminate(
            f"{named} is {self.state.words} after {self.attempts} attempt(s){seen}. It"
            " may have been applied: resume it with the same key, or look it up.",
            self,
        )

    def json(self) -> Any:
        """The final answer's JSON body (`outcome.json()["id"]`).

        Raises `ValueError` when the operation has no final answer to read (it is not
        `succeeded` or `failed`), and `AnswerNotKept` when the store did not keep it.
        """
        if self.response is None:
            raise ValueError(
                f"operation {self.operation_id!r} is {self.state.words}: it has no final"
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
