"""Locks a forked child makes afresh.

A process forked while another of its threads held a lock (a web server forking its
workers from an app that has paid, `multiprocessing` with fork) has no such thread: in
the child that lock is held for ever, and the first call that takes it waits for ever.
An object whose locks a forked child's calls take registers itself here
(`afresh_in_child`); in the child, before anything else runs there, each makes its
locks afresh (its `_locks_afresh()`). What the locks guard stays as the parent left
it: each write of an attribute or a dictionary is whole (the thread that forked held
the interpreter), and what each guards is written in one step, or started again where
it was left (a store being opened).

An object whose connections a fork must not copy in the middle of a write registers
itself too (`quiet_at_fork`): as the process begins to fork, it waits (bounded) for a
write in progress on them to end, and holds them until the fork is done
(`_fork_begins`, then `_fork_ended` in the parent; in the child the held locks are
made afresh anyway, and `quieted` says whether the wait got them). What each fork got
is the forking thread's own: two threads forking at once each let go only what they
took.

Held weakly: an object gone is forgotten. (The lease owners' module lock and the async
client's store threads are made afresh by their own modules, `_store._owners` and
`_worker`.)
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

__all__ = ["afresh_in_child", "quiet_at_fork", "quieted"]


if TYPE_CHECKING:  # for the type checker alone: nothing more to build at import
    from typing import Protocol

    class Afresh(Protocol):
        def _locks_afresh(self) -> None:
            """Make every lock a forked child's calls take afresh (none held)."""

    class Quiet(Protocol):
        def _fork_begins(self) -> bool:
            """Wait (bounded) for a write in progress to end, and hold off the next:
            whether it did (False: a write was still in progress)."""

        def _fork_ended(self, quiet: bool) -> None:
            """In the parent, once forked: let writes go on (`quiet`: as it began)."""


_ALL: weakref.WeakSet[Afresh] = weakref.WeakSet()
_QUIET: weakref.WeakSet[Quiet] = weakref.WeakSet()
#: the objects quieted for the fork under way in this thread, each with what it got
_forking = threading.local()


def afresh_in_child(owner: Afresh) -> None:
    """In a forked child, `owner._locks_afresh()` runs before anything else."""
    _ALL.add(owner)


def quiet_at_fork(owner: Quiet) -> None:
    """As the process begins to fork, `owner._fork_begins()`; in the parent once it has
    forked, `owner._fork_ended()`."""
    _QUIET.add(owner)


def quieted(owner: object) -> bool:
    """In a forked child, as its locks are made afresh: whether the fork waited out
    `owner`'s writes (no write of it was in progress as it forked)."""
    return any(quiet for one, quiet in getattr(_forking, "quieted", ()) if one is owner)


def _before_fork() -> None:
    _forking.quieted = [(owner, owner._fork_begins()) for owner in list(_QUIET)]


def _after_fork_in_parent() -> None:
    done, _forking.quieted = getattr(_forking, "quieted", []), []
    for owner, quiet in reversed(done):
        owner._fork_ended(quiet)


def _after_fork_in_child() -> None:
    try:
        for owner in list(_ALL):
            owner._locks_afresh()
    finally:
        _forking.quieted = []


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
