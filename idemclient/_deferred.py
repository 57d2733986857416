"""A store opened on its first use, for the async clients.

An async client must never do store I/O on the event loop, and it may be built on the
loop (in an ASGI app's startup) or before there is one. So it holds its store as a
`DeferredStore`: nothing is opened when the client is built; the store is opened, and
started (the clock check, the reaping of old bodies), by the first call made to it,
which the async client makes in a worker thread (or when the client is entered, also in
a worker thread). Looking up a method costs nothing; calling it opens the store.

Its `finish` is a `_behind.Finish`, which the async driver may queue rather than await
(the final answer's write), and `behind` keeps those of its queued writes that failed
until a call of the client is told.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from ._behind import Behind, Finish
from ._errors import StoreUnavailable
from ._forks import afresh_in_child
from ._store import AdminStore, OperationStore

__all__ = ["DeferredStore", "opened", "unopened"]


class DeferredStore:
    """A `Store` opened by `open_` and started by `start` on its first call."""

    def __init__(
        self,
        open_: Callable[[], OperationStore],
        start: Callable[[OperationStore], None] | None = None,
        *,
        where: str = "not opened yet",
    ) -> None:
        self._open = open_
        self._start = start
        self._where = where
        self._store: OperationStore | None = None
        self._started = start is None
        self._closed = False
        self._locks_afresh()
        afresh_in_child(self)  # a forked child's calls take the lock too

    def _locks_afresh(self) -> None:
        # Held as the parent forked, it was opening the store: the child opens its own.
        self._lock = threading.Lock()
        # The answers' writes the parent queued, and their failures, are the parent's.
        self.behind = Behind(self._path)
        self._finish = Finish(self.opened, self.behind)

    @property
    def finish(self) -> Finish:
        """The store's `finish`, which the async driver may queue (see `_behind`)."""
        return self._finish

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        """The store's `begin`: first, the answers queued and not written are told
        (a `StoreError`), before anything of this operation is recorded or sent."""
        self._tell_lost()
        return self.opened().begin(*args, **kwargs)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        """The store's `claim`, told first as `begin` is."""
        self._tell_lost()
        return self.opened().claim(*args, **kwargs)

    def _tell_lost(self) -> None:
        if self.behind.lost:
            error = self.behind.take()
            if error is not None:
                raise error

    def opened(self) -> OperationStore:
        """The store, opened and started first if it was not yet (this blocks)."""
        store = self._store
        if store is not None and self._started:
            return store
        with self._lock:
            if self._closed:
                # Closed before its first use: never opened (or created) afterwards.
                raise StoreUnavailable(self._where, "is closed")
            if self._store is None:
                self._store = self._open()
            if not self._started:
                assert self._start is not None
                self._start(self._store)  # tried again at the next call if it fails
                self._started = True
            return self._store

    @property
    def ready(self) -> bool:
        """Opened and started: every call goes straight to the store."""
        return self._store is not None and self._started

    @property
    def path(self) -> str:
        return self.opened().path

    def _path(self) -> str:
        # For a message, never opening the store (it may be asked on the loop).
        store = self._store
        return self._where if store is None else str(getattr(store, "path", self._where))

    def close(self) -> None:
        """Close the store if it was opened; one never opened stays unopened for good."""
        with self._lock:
            self._closed = True
            store = self._store
        if store is not None:
            store.close()

    def __getattr__(self, name: str) -> Any:
        store = self._store
        if store is not None and self._started:
            return getattr(store, name)
        if callable(getattr(AdminStore, name, None)):
            return functools.partial(self._call, name)
        return getattr(self.opened(), name)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.opened(), name)(*args, **kwargs)

    def __repr__(self) -> str:
        store = self._store
        return f"DeferredStore({'not opened yet' if store is None else repr(store)})"


def opened(store: OperationStore) -> OperationStore:
    """`store` itself, opened first if it is a `DeferredStore` (this blocks)."""
    return store.opened() if isinstance(store, DeferredStore) else store


def unopened(store: OperationStore) -> bool:
    """Whether `store` is a `DeferredStore` not yet opened and started."""
    return isinstance(store, DeferredStore) and not store.ready
