"""Every error the client raises, drawn as one tree in the docstring of `IdemError`'s module.

The ones a caller catches every day (`IdemError`, `OutcomeError`, `NotSent`,
`Indeterminate`, `ReconcileRequired`, `KeyConflict`, `StoreError`, `AnswerNotKept`)
are also importable from `idemclient` itself. The errors of a feature are exported by
its package and sit in the same tree: `idemclient.batch.BatchInvalid`,
`idemclient.inbox.SignatureInvalid` and `idemclient.inbox.InvalidMessageId`.
"""

from ._errors import (
    AnswerNotKept,
    ChallengeRequired,
    ForeignStore,
    IdemError,
    Indeterminate,
    InvalidKey,
    KeyConflict,
    MissingKey,
    NotSent,
    OperationFailed,
    OperationMismatch,
    OutcomeError,
    ProfileMismatch,
    ReconcileRequired,
    RequestNotReplayable,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
    StoreUnavailable,
)

__all__ = [
    "AnswerNotKept",
    "ChallengeRequired",
    "ForeignStore",
    "IdemError",
    "Indeterminate",
    "InvalidKey",
    "KeyConflict",
    "MissingKey",
    "NotSent",
    "OperationFailed",
    "OperationMismatch",
    "OutcomeError",
    "ProfileMismatch",
    "ReconcileRequired",
    "RequestNotReplayable",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "StoreUnavailable",
]
