"""Hooks: what the client tells the caller about every operation, attempt, retry and
outcome, and how long its store takes."""

from ._hooks import AttemptEndEvent, AttemptEvent, Hooks, RetryEvent, StartEvent, StoreEvent

__all__ = ["AttemptEndEvent", "AttemptEvent", "Hooks", "RetryEvent", "StartEvent", "StoreEvent"]
