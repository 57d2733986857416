"""An async client's write of a final answer, queued behind the answer rather than
awaited: the caller gets its outcome without waiting for a thread.

The flow asks the store to `finish` an operation with the answer it got; an async
client's store hands it a `Finish` for that, which its driver asks first (`ahead`)
whether the write may go behind. It may when it is the final answer of a call that
still holds the operation's lease: the store writes a final answer whoever holds the
lease unless another caller's final answer is there first, and no other caller can
have finished it while this one's lease holds. What it writes is then known without
the store (as the store's brief write tells it, a `Finished` made from `known`, the
record built only if asked for), and the write is queued to the
loop's store threads (`_worker.Workers.later`): every store call of that loop queued
after it waits for its end, so the next operation under its key, or a read of it, sees
the answer written. Anything else (an unsettled end, a lease that may have lapsed) is
awaited as before: its record is the store's to say.

What the queued write leaves if it never runs (the process killed first) is what a
crash just after the answer always left: the operation in flight under a lease that
ends with the process, maybe applied, resumed under its key or looked up, never sent
under a new one. Until the write has run, the lease stays the call's: other processes
respect it, and so do this process's calls that the queue does not order (another
loop's, a sync client's on the same file), which wait for it as for any live holder.
It goes behind only while the lease holds by `LEASE_MARGIN` on this host's clock (a call
within its deadline always has that much), so that a host whose clock is a little
ahead does not take it over before the write lands.

A queued write that fails is never lost silently: it is logged at once, at ERROR, and
the client's next operation raises a `StoreError` naming the operations whose answers
were not written, before it records or sends anything of its own (a `StoreError` says
that nothing of the call that raises it was recorded). So is one that finds another
caller's final answer there first and keeps it (the write held in its thread past the
lease, a slow disk or another process holding the file's lock, and the operation taken
over meanwhile), when that answer is not the one its caller was told: the store's is
the operation's, as an awaited write's caller would have been told. `aclose` waits for the queued
writes, and does not raise for them: the caller of each had the server's answer, and
an error there would stand in `async with` for the outcome of the last operation, as
if it had not been sent.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import StoreError
from ._hooks import log_fields, logger
from ._outcome import State
from ._store._base import Finished, OperationRecord, Progress, new_finished
from ._store._interface import final_write
from ._store._owners import hold_owner, let_go_owner
from ._time import LEASE_MARGIN, lease_holds
from ._worker import AT_EXIT, flush_all, here, to_thread, unwritten_elsewhere

if TYPE_CHECKING:
    from ._store import OperationStore

__all__ = ["Behind", "Finish", "queued", "written"]


class Behind:
    """The writes an async client queued after its answers that failed, until a call of
    the client is told (`take`)."""

    def __init__(self, where: Callable[[], str]) -> None:
        self._where = where
        self._lock = threading.Lock()
        #: what each failed write would have written, in words
        self._lost: list[str] = []
        #: the answers told whose writes found another caller's there first, in words
        self._overtaken: list[str] = []

    @property
    def lost(self) -> bool:
        return bool(self._lost) or bool(self._overtaken)

    def failed(self, operation_id: str, words: str) -> Callable[[BaseException], None]:
        """What the write of `operation_id`'s answer (`words`) does if it fails."""

        def lost(error: BaseException) -> None:
            if isinstance(error, _Overtaken):
                self._overtaken_by(operation_id, words, error.kept)
                return
            reason = error.reason if isinstance(error, StoreError) else repr(error)
            logger.error(
                "the answer to operation %r (%s) was given to the caller but not written"
                " to the store: %s. The store still has it in flight: it counts as maybe"
                " applied, and is resumed under its key or looked up, never sent under a"
                " new one",
                operation_id,
                words,
                reason,
                extra=log_fields("answer_not_written", operation_id=operation_id),
            )
            with self._lock:
                self._lost.append(f"{operation_id!r} ({words}): {reason}")

        return lost

    def _overtaken_by(self, operation_id: str, words: str, kept: str) -> None:
        logger.error(
            "the answer to operation %r (%s) was given to the caller, but the store kept"
            " another caller's final answer (%s), written first (by a caller paused past its"
            " own lease, or once this one's had lapsed while the write waited): the store's"
            " answer is the operation's",
            operation_id,
            words,
            kept,
            extra=log_fields("answer_not_kept", operation_id=operation_id),
        )
        with self._lock:
            self._overtaken.append(f"{operation_id!r} (told {words}; kept {kept})")

    def take(self) -> StoreError | None:
        """The error naming the answers not written, or not kept, since the last one was
        told, if any; told once."""
        with self._lock:
            lost, self._lost = self._lost, []
            overtaken, self._overtaken = self._overtaken, []
        if not lost and not overtaken:
            return None
        try:
            where = self._where()
        except StoreError as error:
            where = error.path
        said = []
        if lost:
            said.append(
                "the answers to these operations were given to their callers but could not"
                f" be written: {'; '.join(lost)}. The store still has them in flight (maybe"
                " applied): resume them, or look them up, before relying on the store for"
                " them"
            )
        if overtaken:
            said.append(
                "the answers to these operations were given to their callers, but the store"
                " kept another caller's, written first (by a caller paused past its own lease,"
                " or once the lease of the one told had lapsed while its write waited):"
                f" {'; '.join(overtaken)}. The store's answer is the operation's: read it"
                " (aoperation) before acting on the one told"
            )
        return StoreError(where, ". ".join(said))


class Finish:
    """`store.finish`, which an async client's driver may queue rather than await
    (see the module docstring)."""

    __slots__ = ("behind", "store")
    __name__ = "finish"  # what a client's `on_store` hook is told

    def __init__(self, store: Callable[[], OperationStore], behind: Behind) -> None:
        self.store = store
        self.behind = behind

    def __call__(self, operation_id: str, **kwargs: Any) -> OperationRecord:
        return self.store().finish(operation_id, **kwargs)

    def ahead(self, kwargs: Mapping[str, Any]) -> Finished | None:
        """What this write tells, known without the store, if it may be queued: a final
        answer, by the holder of a lease that holds now. Told as the store's brief write
        tells one that landed (`Finished`: the record built only if asked for)."""
        known: OperationRecord | None = kwargs.get("known")
        progress: Progress = kwargs["progress"]
        state: State = kwargs["state"]
        if (
            known is None
            or not state.finished
            or known.lease_owner != kwargs["owner"]
            # By a margin: a host whose clock is a little ahead must not take it over
            # before the write lands (a call within its deadline has more than that).
            or not lease_holds(known.lease_expires, progress.now + LEASE_MARGIN)
        ):
            return None
        return new_finished(
            kwargs["operation_id"],
            known.key,
            state,
            progress.attempts,
            known.maybe_applied or progress.maybe_applied,
            progress.evidence,
            None,  # a final answer ends any wait
            kwargs.get("response"),
            known,
            progress,
        )

    def queue(
        self, kwargs: Mapping[str, Any], told: Finished
    ) -> tuple[Callable[[], object], Callable[[BaseException], None]]:
        """The queued write of the answer `told` to its caller, and what it does if it
        fails, or finds another caller's answer there first."""
        words = _in_words(told)
        operation_id, owner = kwargs["operation_id"], kwargs["owner"]
        # Its call ends before it runs: the lease stays the call's, in this process too
        # (another loop's call, a sync client's), until the write has run.
        hold_owner(owner)

        def write() -> object:
            try:
                # The store's brief form where it has one: what it wrote is compared in
                # words, with no record built for an answer that landed as told.
                written = final_write(self.store())(**kwargs)
            finally:
                let_go_owner(owner)
            kept = _in_words(written)
            if kept != words:
                raise _Overtaken(kept)
            return written

        return write, self.behind.failed(operation_id, words)


class _Overtaken(Exception):
    """A queued write that found another caller's final answer there first, not the one
    told (`kept`, in words)."""

    def __init__(self, kept: str) -> None:
        super().__init__(kept)
        self.kept = kept


def _in_words(record: Finished | OperationRecord) -> str:
    """A final answer as its caller is told it: the state, and the HTTP status."""
    state, response = record.state, record.response
    return state.value if response is None else f"{state.value}, HTTP {response.status_code}"


def queued(finish: Finish, kwargs: Mapping[str, Any]) -> Finished | None:
    """Queue the write `finish(**kwargs)` to the running loop's store threads, if it
    may go behind the answer, and give back what it writes (see `Finish.ahead`); None:
    await it."""
    record = finish.ahead(kwargs)
    if record is None:
        return None
    workers = here()
    if workers is None:
        return None  # trio: anyio's threads, awaited
    workers.later(*finish.queue(kwargs, record))
    return record


async def written() -> None:
    """Wait for the writes queued so far in this loop's store threads, and in any other
    loop's: a client used in one loop and closed in another (`asyncio.run` twice) must
    not close its store under an answer's write still running there."""
    workers = here()
    if workers is not None:
        await workers.flush()
    if unwritten_elsewhere(workers):
        await to_thread(functools.partial(flush_all, AT_EXIT))
