"""Hooks: what the client tells the caller about every attempt, retry and outcome."""

from ._hooks import AttemptEvent, Hooks, RetryEvent

__all__ = ["AttemptEvent", "Hooks", "RetryEvent"]
