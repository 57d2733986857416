"""idemclient: safe retries for unsafe HTTP requests.

One idempotency key per logical operation, persisted before the first byte is sent,
retried within one total deadline, and outcomes reported honestly: succeeded, failed,
not sent, or indeterminate (maybe applied).
"""

from ._budget import RetryBudget
from ._client import AsyncClient, Client, aresume, resume, wrap
from ._clock import Clock, ManualClock, SystemClock, set_testing
from ._errors import (
    AnswerNotKept,
    BatchInvalid,
    ForeignStore,
    IdemError,
    Indeterminate,
    InvalidKey,
    InvalidMessageId,
    KeyConflict,
    NotSent,
    OperationMismatch,
    OutcomeError,
    ReconcileRequired,
    Rejected,
    RequestNotReplayable,
    SignatureInvalid,
    StoreCorrupt,
    StoreError,
    StoreTooNew,
    StoreUnavailable,
)
from ._hooks import AttemptEvent, Hooks, RetryEvent
from ._keys import DEFAULT_NAMESPACE, derive_key, key_from_identity, new_key, validate_key
from ._outcome import Outcome, State, outcome_of
from ._policy import RetryPolicy
from ._retry_after import parse_retry_after
from ._store import BodyEncryption, Durability, OperationRecord, SQLiteStore, Store
from ._transport import AsyncIdempotentTransport, IdempotentTransport

__version__ = "0.1.0.dev0"

__all__ = [
    "DEFAULT_NAMESPACE",
    "AnswerNotKept",
    "AsyncClient",
    "AsyncIdempotentTransport",
    "AttemptEvent",
    "BatchInvalid",
    "BodyEncryption",
    "Client",
    "Clock",
    "Durability",
    "ForeignStore",
    "Hooks",
    "IdemError",
    "IdempotentTransport",
    "Indeterminate",
    "InvalidKey",
    "InvalidMessageId",
    "KeyConflict",
    "ManualClock",
    "NotSent",
    "OperationMismatch",
    "OperationRecord",
    "Outcome",
    "OutcomeError",
    "ReconcileRequired",
    "Rejected",
    "RequestNotReplayable",
    "RetryBudget",
    "RetryEvent",
    "RetryPolicy",
    "SQLiteStore",
    "SignatureInvalid",
    "State",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoreTooNew",
    "StoreUnavailable",
    "SystemClock",
    "__version__",
    "aresume",
    "derive_key",
    "key_from_identity",
    "new_key",
    "outcome_of",
    "parse_retry_after",
    "resume",
    "set_testing",
    "validate_key",
    "wrap",
]
