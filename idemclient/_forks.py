"""Locks a forked child makes afresh.

A process forked while another of its threads held a lock (a web server forking its
workers from an app that has paid, `multiprocessing` with fork) has no such thread: in
the child that lock is held for ever, and the first call that takes it waits for ever.
An object whose locks a forked child's calls take registers itself here
(`afresh_in_child`); in the child, before anything else runs there, each makes its
locks afresh (`Afresh._locks_afresh`). What the locks guard stays as the parent left
it: the thread that forked held the interpreter, so no update of a dictionary or an
attribute was cut in half.

Held weakly: an object gone is forgotten. (The lease owners' module lock and the async
client's store threads are made afresh by their own modules, `_store._owners` and
`_worker`.)
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["Afresh", "afresh_in_child"]


class Afresh(Protocol):
    def _locks_afresh(self) -> None:
        """Make every lock a forked child's calls take afresh (none held)."""


_ALL: weakref.WeakSet[Afresh] = weakref.WeakSet()


def afresh_in_child(owner: Afresh) -> None:
    """In a forked child, `owner._locks_afresh()` runs before anything else."""
    _ALL.add(owner)


def _after_fork_in_child() -> None:
    for owner in list(_ALL):
        owner._locks_afresh()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
