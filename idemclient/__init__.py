"""idemclient: safe retries for unsafe HTTP requests.

One idempotency key per logical operation, persisted before the first byte is sent,
retried within one total deadline, and outcomes reported honestly: succeeded, failed,
not sent, or indeterminate (maybe applied).

The top level holds what a caller uses every day. The rest lives by topic, each
module holding all of its topic (the everyday names of a topic are also here):
`idemclient.errors` (the error tree), `idemclient.keys`, `idemclient.policy`,
`idemclient.store`, `idemclient.hooks`, `idemclient.clock`, `idemclient.transport`,
`idemclient.profiles` (each payment API's idempotency dialect),
`idemclient.otel` (OpenTelemetry, with the `otel` extra), and the features
`idemclient.batch`, `idemclient.inbox`, `idemclient.postgres` and `idemclient.testing`.
"""

import importlib
import typing
import warnings

# Importing idemclient is cheap: the error tree (what a caller catches) is imported here,
# everything else when it is first used (`idemclient.Client`, `from idemclient import
# Client`, `idemclient.store.X`), so that a process that only imports idemclient (a
# pytest run with its plugin, a module that imports it for a type) pays for httpx and
# no more. The names are the same objects as ever; type checkers see them below.
from . import errors as errors
from ._errors import (
    AnswerNotKept,
    IdemError,
    Indeterminate,
    KeyConflict,
    NotSent,
    OutcomeError,
    ReconcileRequired,
    StoreError,
)
from ._version import __version__

if typing.TYPE_CHECKING:
    from . import clock as clock
    from . import hooks as hooks
    from . import keys as keys
    from . import otel as otel
    from . import policy as policy
    from . import profiles as profiles
    from . import store as store
    from . import transport as transport
    from ._client import AsyncClient, Client, aresume, resume, wrap
    from ._clock import ManualClock
    from ._keys import key_from_identity, new_key
    from ._outcome import Outcome, State, outcome_of
    from ._policy import RetryPolicy

#: The top-level names imported when first used: name -> the module that defines it.
_LAZY: dict[str, str] = {
    "AsyncClient": "idemclient._client",
    "Client": "idemclient._client",
    "aresume": "idemclient._client",
    "resume": "idemclient._client",
    "wrap": "idemclient._client",
    "ManualClock": "idemclient._clock",
    "key_from_identity": "idemclient._keys",
    "new_key": "idemclient._keys",
    "Outcome": "idemclient._outcome",
    "State": "idemclient._outcome",
    "outcome_of": "idemclient._outcome",
    "RetryPolicy": "idemclient._policy",
}

#: The topic modules, reachable as attributes once `idemclient` is imported.
_TOPICS = frozenset({"clock", "hooks", "keys", "otel", "policy", "profiles", "store", "transport"})

__all__ = [
    "AnswerNotKept",
    "AsyncClient",
    "Client",
    "IdemError",
    "Indeterminate",
    "KeyConflict",
    "ManualClock",
    "NotSent",
    "Outcome",
    "OutcomeError",
    "ReconcileRequired",
    "RetryPolicy",
    "State",
    "StoreError",
    "__version__",
    "aresume",
    "key_from_identity",
    "new_key",
    "outcome_of",
    "resume",
    "wrap",
]

#: Names that were importable from `idemclient` and now live in a module of their own:
#: name -> that module. They still resolve here, with a `DeprecationWarning`.
_MOVED: dict[str, str] = {
    "DEFAULT_NAMESPACE": "idemclient.keys",
    "derive_key": "idemclient.keys",
    "validate_key": "idemclient.keys",
    "RetryBudget": "idemclient.policy",
    "parse_retry_after": "idemclient.policy",
    "Store": "idemclient.store",
    "SQLiteStore": "idemclient.store",
    "Durability": "idemclient.store",
    "BodyEncryption": "idemclient.store",
    "OperationRecord": "idemclient.store",
    "Hooks": "idemclient.hooks",
    "AttemptEvent": "idemclient.hooks",
    "RetryEvent": "idemclient.hooks",
    "Clock": "idemclient.clock",
    "SystemClock": "idemclient.clock",
    "set_testing": "idemclient.clock",
    "IdempotentTransport": "idemclient.transport",
    "AsyncIdempotentTransport": "idemclient.transport",
    "InvalidKey": "idemclient.errors",
    "RequestNotReplayable": "idemclient.errors",
    "OperationMismatch": "idemclient.errors",
    "StoreCorrupt": "idemclient.errors",
    "ForeignStore": "idemclient.errors",
    "StoreTooNew": "idemclient.errors",
    "StoreUnavailable": "idemclient.errors",
    "BatchInvalid": "idemclient.batch",
    "InvalidMessageId": "idemclient.inbox",
    "SignatureInvalid": "idemclient.inbox",
}

#: Names that were importable from `idemclient` and are going away: name -> why.
_RETIRED: dict[str, str] = {
    "Rejected": (
        "idemclient.Rejected is deprecated: it is never raised. A final refusal is an"
        " Outcome in state State.FAILED; a key held for another request raises"
        " idemclient.KeyConflict (still a subclass of Rejected, for now)."
    ),
}

if typing.TYPE_CHECKING:  # what type checkers see while the old names still resolve
    from ._budget import RetryBudget as RetryBudget
    from ._clock import Clock as Clock
    from ._clock import SystemClock as SystemClock
    from ._clock import set_testing as set_testing
    from ._errors import BatchInvalid as BatchInvalid
    from ._errors import ForeignStore as ForeignStore
    from ._errors import InvalidKey as InvalidKey
    from ._errors import InvalidMessageId as InvalidMessageId
    from ._errors import OperationMismatch as OperationMismatch
    from ._errors import Rejected as Rejected
    from ._errors import RequestNotReplayable as RequestNotReplayable
    from ._errors import SignatureInvalid as SignatureInvalid
    from ._errors import StoreCorrupt as StoreCorrupt
    from ._errors import StoreTooNew as StoreTooNew
    from ._errors import StoreUnavailable as StoreUnavailable
    from ._hooks import AttemptEvent as AttemptEvent
    from ._hooks import Hooks as Hooks
    from ._hooks import RetryEvent as RetryEvent
    from ._keys import DEFAULT_NAMESPACE as DEFAULT_NAMESPACE
    from ._keys import derive_key as derive_key
    from ._keys import validate_key as validate_key
    from ._retry_after import parse_retry_after as parse_retry_after
    from ._store import BodyEncryption as BodyEncryption
    from ._store import Durability as Durability
    from ._store import OperationRecord as OperationRecord
    from ._store import SQLiteStore as SQLiteStore
    from ._store import Store as Store
    from ._transport import AsyncIdempotentTransport as AsyncIdempotentTransport
    from ._transport import IdempotentTransport as IdempotentTransport


def __getattr__(name: str) -> object:
    """Import a top-level name or topic module at its first use; resolve a name that
    left the top level, warning where it lives now."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # looked up once
        return value
    if name in _TOPICS:
        return importlib.import_module(f"idemclient.{name}")
    if name in _MOVED:
        home = _MOVED[name]
        warnings.warn(
            f"idemclient.{name} is deprecated; import it from {home} ({home}.{name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    if name in _RETIRED:
        warnings.warn(_RETIRED[name], DeprecationWarning, stacklevel=2)
        from . import _errors

        return getattr(_errors, name)
    raise AttributeError(f"module 'idemclient' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_TOPICS})
