"""A request sent, and its answer's body read, within the call's deadline: each of
httpx's timeouts cut to the time left (`cut_timeouts`), and the body's reads stopped at
the deadline (`bound_body`, `_DeadlineStream`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from typing import Any

import httpx

__all__ = ["bound_body", "cut_timeouts"]

#: Request extension keeping the timeouts the caller asked for, beside those cut from
#: them for the last send (see `cut_timeouts`).
_ASKED = "idemclient.timeout_asked"


def cut_timeouts(extensions: MutableMapping[str, Any], timeout: float) -> None:
    """Set a request's timeouts (its `extensions`) for one send: each of httpx's four
    (connect, read, write, pool) as the caller asked it, cut to `timeout` (None, unbounded,
    is cut too). An attempt of an operation, and the GET that follows its redirect."""
    current = extensions.get("timeout") or {}
    # Cut from what the caller asked, never from what an earlier call of the same
    # request left (a request sent again after NotSent has its whole deadline): the
    # caller's timeouts are kept beside the ones cut from them, and a request whose
    # timeouts are not the ones cut for it last has the caller's own. (A hook that
    # edits the cut ones in place has set its own: they are asked.) A redirect's
    # request carries the same extensions, so what the caller asked reaches it too.
    kept = extensions.get(_ASKED)
    asked = (
        kept[0]
        if kept is not None and kept[1] is current and tuple(current.values()) == kept[2]
        else current
    )
    connect, read, write, pool = (
        asked.get("connect"),
        asked.get("read"),
        asked.get("write"),
        asked.get("pool"),
    )
    cut = {
        "connect": timeout if connect is None or connect > timeout else connect,
        "read": timeout if read is None or read > timeout else read,
        "write": timeout if write is None or write > timeout else write,
        "pool": timeout if pool is None or pool > timeout else pool,
    }
    extensions["timeout"] = cut
    extensions[_ASKED] = (asked, cut, tuple(cut.values()))


def bound_body(response: httpx.Response, remaining: Callable[[], float]) -> None:
    """Make reading `response`'s body give up once `remaining()` is spent."""
    response.stream = _DeadlineStream(response.stream, remaining)


class _DeadlineStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that stops at the call's deadline.

    httpx's read timeout bounds each read, not the body: a server dripping one byte at a
    time would hold the call (and its lease) as long as it likes. Between reads this
    checks the deadline, and past it gives up as a read timeout would: the answer did
    not arrive whole, so the operation may have been applied and has no answer.
    """

    def __init__(
        self,
        inner: httpx.SyncByteStream | httpx.AsyncByteStream,
        remaining: Callable[[], float],
    ) -> None:
        self._inner = inner
        self._remaining = remaining

    def _check(self) -> None:
        if self._remaining() <= 0:
            raise httpx.ReadTimeout(
                "the deadline passed while the answer's body was still arriving"
            )

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        for chunk in self._inner:
            self._check()
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        async for chunk in self._inner:
            self._check()
            yield chunk

    def close(self) -> None:
        if isinstance(self._inner, httpx.SyncByteStream):
            self._inner.close()

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx.AsyncByteStream):
            await self._inner.aclose()
