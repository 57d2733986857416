"""A host clock seen to go back, kept in the store: its unfinished operations are of
unknown age from then on (see `_time` for how ages are judged)."""

from __future__ import annotations

from ._clock import Clock
from ._hooks import log_fields, logger
from ._settings import Settings
from ._store._interface import OperationStore
from ._time import ahead

__all__ = ["check_store_clock", "clock_went_back", "keep_step"]


def clock_went_back(store: OperationStore, step: float, *, now: float, seen: str) -> int:
    """Keep, in `store`, that a clock of its users went back `step` seconds to `now`
    (seen as `seen` says): its unfinished operations are of unknown age from now on,
    and once they may have been applied are looked up rather than sent again."""
    marked = store.clock_went_back(step=step, now=now)
    logger.warning(
        "the clock went back %.0fs (seen %s): %d unfinished operation(s) of the store %s"
        " are of unknown age now: once they may have been applied, they are looked up"
        " rather than sent again",
        step,
        seen,
        marked,
        store.path,
        extra=log_fields("clock_went_back", step=step, marked=marked),
    )
    return marked


def keep_step(settings: Settings, step: float, *, seen: str) -> int:
    """`clock_went_back` for a step the settings' watch saw; once the store has it, the
    watch stops reporting it (a store that failed to take it is asked again)."""
    marked = clock_went_back(settings.store, step, now=settings.clock.time(), seen=seen)
    if settings.watch is not None:
        settings.watch.kept(step)
    return marked


def check_store_clock(store: OperationStore, clock: Clock) -> float:
    """As a client or transport starts: note the clock's time in the store, and keep a
    step back if it reads earlier than the latest time the store has seen (this clock,
    or another user's, went back). Returns that latest time (0.0 for a new store)."""
    now = clock.time()
    seen = store.advance_clock(now=now)
    step = ahead(seen, now)
    if step:
        clock_went_back(store, step, now=now, seen="at a start, against the store's times")
    return seen
