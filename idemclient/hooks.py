"""Hooks: what the client tells the caller about every operation, attempt, retry and
outcome, how long its store takes, and when each call ends; and `drop_legacy_fields`,
a logging filter that leaves the deprecated bare field names out of its records."""

from ._hooks import (
    AttemptEndEvent,
    AttemptEvent,
    EndEvent,
    Hooks,
    RetryEvent,
    StartEvent,
    StoreEvent,
    drop_legacy_fields,
)

__all__ = [
    "AttemptEndEvent",
    "AttemptEvent",
    "EndEvent",
    "Hooks",
    "RetryEvent",
    "StartEvent",
    "StoreEvent",
    "drop_legacy_fields",
]
