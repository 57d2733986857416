"""idemclient: safe retries for unsafe HTTP requests.

One idempotency key per logical operation, persisted before the first byte is sent,
retried within one total deadline, and outcomes reported honestly: succeeded, failed,
not sent, or indeterminate (maybe applied).
"""

from ._errors import (
    ForeignStore,
    IdemError,
    Indeterminate,
    InvalidKey,
    KeyConflict,
    NotSent,
    OperationMismatch,
    OutcomeError,
    ReconcileRequired,
    Rejected,
    RequestNotReplayable,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
    StoreUnavailable,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "ForeignStore",
    "IdemError",
    "Indeterminate",
    "InvalidKey",
    "KeyConflict",
    "NotSent",
    "OperationMismatch",
    "OutcomeError",
    "ReconcileRequired",
    "Rejected",
    "RequestNotReplayable",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "StoreUnavailable",
    "__version__",
]
