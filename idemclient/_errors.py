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
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from ._outcome import Outcome

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


def _name_public_homes() -> None:
    """Each error under the module a caller imports it from, as tracebacks show it."""
    homes = {"BatchInvalid": "idemclient.batch"}
    homes |= dict.fromkeys(("InvalidMessageId", "SignatureInvalid"), "idemclient.inbox")
    homes["Rejected"] = "idemclient"  # only ever reached as the deprecated idemclient.Rejected
    for name in __all__:
        globals()[name].__module__ = homes.get(name, "idemclient.errors")


_name_public_homes()
