"""Every error idemclient raises, in one tree.

```
IdemError
├── InvalidKey                 (also ValueError) a key outside 1..255 of A-Z a-z 0-9 - _ . : ~
│   ├── InvalidMessageId  [i]  a webhook message id (or sender) breaking the same rule
│   └── MissingKey             no key where the server profile reads it (a JSON body field)
├── RequestNotReplayable       (also ValueError) a body that cannot be sent twice
├── OperationMismatch          (also ValueError) same operation, different request
├── ProfileMismatch            (also ValueError) a chosen profile at another provider's host
├── BatchInvalid          [b]  (also ValueError) a batch file with problems; nothing sent
├── SignatureInvalid      [i]  a webhook refused: signature missing, malformed, wrong or stale
├── AnswerNotKept         [*]  a final answer given back from the store without its body
├── StoreError            [*]  the store (a SQLite file, a PostgreSQL schema) cannot be used
│   ├── StoreCorrupt           not a readable SQLite file; PostgreSQL tables changed under us
│   ├── ForeignStore           a database, but not an idemclient store
│   ├── StoreTooNew            written by a newer idemclient (schema version)
│   └── StoreUnavailable       cannot be opened for writing (read-only, locked, unreachable)
└── OutcomeError          [*]  an operation ended without a final success
    ├── OperationFailed        a final refusal (402, 400, 404...), from Outcome.raise_for_status()
    ├── Rejected          [d]  deprecated, never raised: the base of KeyConflict, for now
    │   └── KeyConflict   [*]  HTTP 422: the key was used with a different request
    ├── NotSent           [*]  no attempt reached the server: safe to retry with the same key
    │   └── ChallengeRequired  the server asks for the request to be signed first (Wise SCA)
    └── Indeterminate     [*]  maybe applied, no final answer: never treat as failed
        └── ReconcileRequired  [*]  maybe applied and older than the server's key retention
```

Where each is imported from: every error of the client from `idemclient.errors`, and
those marked [*] also from `idemclient` itself (`IdemError` too); [b] from
`idemclient.batch`; [i] from `idemclient.inbox`; [d] only as the deprecated
`idemclient.Rejected`. All are defined here, so there is one tree.

An `OutcomeError` carries the `Outcome` (key, operation id, state, attempts, last
evidence, final response if any). The underlying cause is chained with `raise ... from`,
never swallowed. `Indeterminate` is deliberately not a kind of `KeyConflict` (nor of
`Rejected`): "maybe charged" must not be handled as "not charged". A final refusal
other than HTTP 422 is not an error: it is an `Outcome` in state `failed`, which
`Outcome.raise_for_status()` raises as `OperationFailed` for a caller who wants it so.

Each public error names its public module (`__module__`), so that a traceback reads
``idemclient.errors.Indeterminate: ...``, not this private module.

The `Outcome` an `OutcomeError` carries, and the `State` it is in, are defined here as
well: an outcome raises its error (`Outcome.raise_for_status()`) and an error carries
its outcome, one idea that no two modules could hold without importing each other.
The package takes them from the outcome's module, beside what reads an outcome from a
response or makes one from a stored record.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = [
    "AnswerNotKept",
    "BatchInvalid",
    "ChallengeRequired",
    "ForeignStore",
    "IdemError",
    "Indeterminate",
    "InvalidKey",
    "InvalidMessageId",
    "KeyConflict",
    "MissingKey",
    "NotSent",
    "OperationFailed",
    "OperationMismatch",
    "OutcomeError",
    "ProfileMismatch",
    "ReconcileRequired",
    "Rejected",
    "RequestNotReplayable",
    "SignatureInvalid",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "StoreUnavailable",
]


class IdemError(Exception):
    """Root of every error raised by idemclient."""


class InvalidKey(IdemError, ValueError):
    """An idempotency key that the protocol does not allow.

    Raised at the call site, before anything is recorded or sent.
    """

    #: what the rejected value is, in the message
    what = "idempotency key"

    def __init__(self, key: object, reason: str) -> None:
        self.key = key
        self.reason = reason
        shown = repr(key) if not isinstance(key, str) or len(key) <= 60 else repr(key[:60]) + "..."
        super().__init__(f"invalid {self.what} {shown}: {reason}")


class InvalidMessageId(InvalidKey):
    """A webhook message id or sender name outside the key rules (1..255 of
    ``A-Z a-z 0-9 - _ . : ~``), or a signed delivery's id with a ``.`` (the signed
    text's separator). Nothing is recorded and the handler does not run.

    `key` holds the rejected value. It is an `InvalidKey` because it is checked by the
    same rule, so one `except InvalidKey` covers both.
    """

    def __init__(self, value: object, reason: str, *, what: str = "message id") -> None:
        self.what = what  # "message id" or "sender": both are scopes of a dedupe record
        super().__init__(value, reason)


class MissingKey(InvalidKey):
    """A request with no key where its server profile's server reads it (a field of
    the JSON body, under `wrap()`), or whose body is not JSON there. Raised before
    anything is recorded or sent."""


class RequestNotReplayable(IdemError, ValueError):
    """A request body that cannot be buffered for a retry (too large or unreadable)."""


class OperationMismatch(IdemError, ValueError):
    """The same operation was issued again with a different request.

    Raised before anything is sent: reusing an operation id or key for another request
    is a bug in the caller, and sending it could apply the wrong payment.
    """

    def __init__(
        self,
        message: str,
        *,
        operation_id: str,
        key: str,
        conflicts: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.operation_id = operation_id
        self.key = key
        #: for a registration of many operations: (operation id, reason) of each one
        self.conflicts = conflicts or ((operation_id, message),)
        super().__init__(message)


class ProfileMismatch(IdemError, ValueError):
    """A client whose chosen server profile contradicts the provider of the host a
    request goes to (``profile="stripe"`` at ``api-m.paypal.com``): its key would go
    where that server does not read it. Raised for a request either profile sends as an
    operation, before anything is recorded or sent; ``profile_by_host=False`` allows it
    on purpose (a proxy, a test double)."""

    def __init__(self, message: str, *, chosen: str, known: str, host: str) -> None:
        #: the profile the client speaks, the one the host's provider speaks, the host
        self.chosen, self.known, self.host = chosen, known, host
        super().__init__(message)


class BatchInvalid(IdemError, ValueError):
    """A batch file that cannot be submitted. Nothing was recorded and nothing was sent.

    `problems` lists each as (row number, reason); row 0 is the file itself (its
    header, its encoding). Data rows are numbered from 1, in file order.
    """

    def __init__(self, source: str, problems: list[tuple[int, str]]) -> None:
        self.source = source
        self.problems = problems
        shown = "\n".join(
            f"  {'file' if row == 0 else f'row {row}'}: {reason}" for row, reason in problems[:50]
        )
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"{source}: {len(problems)} problem(s); nothing was sent:\n{shown}{more}")


class SignatureInvalid(IdemError):
    """A webhook whose signature does not prove it came from the sender, now.

    Verification fails closed: a missing or malformed header, a signature made with no
    secret we hold, a body, message id or timestamp changed on the way, or a timestamp
    outside the tolerance all refuse the message. Nothing is recorded and the handler
    does not run. `reason` is one of "missing", "malformed", "mismatch", "stale" and
    "future"; `message_id` is the claimed id, if any (unverified).
    """

    REASONS = frozenset({"missing", "malformed", "mismatch", "stale", "future"})

    def __init__(self, reason: str, detail: str, *, message_id: str | None = None) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"unknown reason {reason!r}")
        self.reason = reason
        self.detail = detail
        self.message_id = message_id
        super().__init__(f"webhook signature refused ({reason}): {detail}")


class AnswerNotKept(IdemError):
    """The body of an operation's final answer was not kept by the store, and is asked for.

    An answer over the store's `max_stored_body`, or dropped when its finished
    operation was reaped, keeps only its status, headers, size and sha256. Re-issued,
    the operation comes back with `outcome.body_omitted` true; reading the body of
    `outcome.response` (or of a wrapped client's response, which httpx reads at once)
    raises this, never an empty body. `outcome` is the operation's (its state is the
    truth: a payment that succeeded did succeed); `size` and `sha256` describe the body.
    """

    def __init__(self, message: str, outcome: Outcome, *, size: int, sha256: str) -> None:
        self.outcome = outcome
        self.size = size
        self.sha256 = sha256
        super().__init__(message)

    @property
    def response(self) -> httpx.Response | None:
        """The answer without its body (status and headers), as `outcome.response`."""
        return self.outcome.response


class StoreError(IdemError):
    """The local store cannot be used. Nothing in it has been changed."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"idemclient store {self.path!r}: {reason}")


class StoreCorrupt(StoreError):
    """The file is not a readable SQLite database. It is left exactly as found."""


class ForeignStore(StoreError):
    """The file is a database that idemclient did not create. It is left as found."""


class StoreTooNew(StoreError):
    """The store was written by a newer version of idemclient."""


class StoreUnavailable(StoreError):
    """The store cannot be opened for writing (permissions, read-only media, locks)."""


class OutcomeError(IdemError):
    """An operation ended without a final success. `outcome` says what is known."""

    def __init__(self, message: str, outcome: Outcome) -> None:
        self.outcome = outcome
        super().__init__(message)

    @property
    def key(self) -> str:
        return self.outcome.key

    @property
    def operation_id(self) -> str:
        return self.outcome.operation_id

    @property
    def evidence(self) -> str:
        return self.outcome.evidence


class Rejected(OutcomeError):
    """Deprecated, and never raised itself: a final refusal is an `Outcome` in state
    `failed`, not an error. Only `KeyConflict` derives from it, so an `except Rejected`
    written against an earlier release keeps working until it goes."""


class KeyConflict(Rejected):
    """HTTP 422: the server holds this key for a different request. A caller bug."""


class OperationFailed(OutcomeError):
    """The operation ended with a final refusal (state `failed`: a declined card's 402,
    a 400, a 404...), raised by `Outcome.raise_for_status()` only: the client itself
    returns such an outcome. Nothing more will come of this operation: sending it again
    under the same key gets the same answer; `outcome.response` holds the refusal."""

    @property
    def response(self) -> httpx.Response | None:
        """The refusal (as `outcome.response`)."""
        return self.outcome.response


class NotSent(OutcomeError):
    """No attempt reached the server. Safe to send again later with the same key."""


class ChallengeRequired(NotSent):
    """The server asks for the request to be signed before it acts (Wise's strong
    customer authentication: HTTP 403 with a one-time token in ``x-2fa-approval``).
    Nothing was applied. Sign the token and issue the same operation again with the
    signature's headers; `outcome.response` holds the challenge."""


class Indeterminate(OutcomeError):
    """The request may have been applied and no final answer arrived.

    Do not charge again under a new key. Resume the operation later (same key), or
    settle it by looking it up on the server.
    """


class ReconcileRequired(Indeterminate):
    """Maybe applied, and sending it again could apply it twice (older than the server
    keeps keys, or an answer that sending again cannot explain): `reason` says which.

    Settle it by looking it up on the server (by key or end-to-end reference).
    """

    #: why it is not sent again, in words ("" when the message alone says it)
    reason: str = ""


# -- what an operation came to --------------------------------------------------------


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


_FINISHED = frozenset({State.SUCCEEDED, State.FAILED})


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


def _name_public_homes() -> None:
    """Each error under the module a caller imports it from, as tracebacks show it."""
    homes = {"BatchInvalid": "idemclient.batch"}
    homes |= dict.fromkeys(("InvalidMessageId", "SignatureInvalid"), "idemclient.inbox")
    homes["Rejected"] = "idemclient"  # only ever reached as the deprecated idemclient.Rejected
    for name in __all__:
        globals()[name].__module__ = homes.get(name, "idemclient.errors")


_name_public_homes()
