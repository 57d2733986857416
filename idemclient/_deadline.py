"""An answer's body read within the call's deadline (see `_DeadlineStream`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import httpx

__all__ = ["bound_body"]


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
