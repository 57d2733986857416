"""A final answer given back from the store, as an httpx response.

When the store kept the body, it is an ordinary response holding it. When it did not
(over `max_stored_body`, or reaped: only the size and sha256 are left), it is an
`AnswerWithoutBody`: the status and headers are there, and any read of the body raises
`AnswerNotKept`, carrying the operation's outcome. httpx reads a response's body as
soon as it is returned (unless streaming), so a wrapped client's `post()` raises it at
once; `Client.post()` catches it and returns the outcome, which says `body_omitted`.
Never an empty body where there was one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx

from ._errors import AnswerNotKept
from ._outcome import OUTCOME, Outcome
from ._store._base import StoredResponse

__all__ = ["AnswerWithoutBody", "stored_response"]

#: The store keeps the body as httpx decoded it; its encoding no longer applies.
_DECODED_AWAY = frozenset({"content-encoding"})


def stored_response(stored: StoredResponse, request: httpx.Request) -> httpx.Response:
    """The stored answer to `request`, with its body if the store kept it."""
    headers = [(n, v) for n, v in stored.headers if n.lower() not in _DECODED_AWAY]
    if stored.body_omitted:
        return AnswerWithoutBody(stored, headers, request)
    return httpx.Response(stored.status_code, headers=headers, content=stored.body, request=request)


class _NotKept(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that is not there: iterating it raises."""

    def __init__(self, response: AnswerWithoutBody) -> None:
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        raise self._response.not_kept()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise self._response.not_kept()
        yield b""  # type: ignore[unreachable]  # makes this an async generator


class AnswerWithoutBody(httpx.Response):
    """A stored final answer whose body the store did not keep (see the module)."""

    def __init__(
        self, stored: StoredResponse, headers: list[tuple[str, str]], request: httpx.Request
    ) -> None:
        self.stored = stored
        # A stream, not content: httpx reads content given at once, and this one raises.
        super().__init__(
            stored.status_code, headers=headers, stream=_NotKept(self), request=request
        )

    def not_kept(self) -> AnswerNotKept:
        outcome = self.extensions.get(OUTCOME)
        if not isinstance(outcome, Outcome):  # pragma: no cover - the call always sets it
            raise RuntimeError("a stored answer without its outcome")
        size, sha256 = self.stored.body_size, self.stored.body_sha256
        return AnswerNotKept(
            f"operation {outcome.operation_id!r} (key {outcome.key}) is {outcome.state.words}"
            f" with HTTP {self.status_code}, answered from the store, which did not keep"
            f" the answer's body ({size} bytes, sha256 {sha256}): it was over the store's"
            " max_stored_body, or dropped when the finished operation was reaped. The"
            " operation is not sent again; look the payment up on the server to read it",
            outcome,
            size=size,
            sha256=sha256,
        )

    @property
    def content(self) -> bytes:
        raise self.not_kept()

    def read(self) -> bytes:
        raise self.not_kept()

    async def aread(self) -> bytes:
        raise self.not_kept()

    def iter_raw(self, chunk_size: int | None = None) -> Iterator[bytes]:
        raise self.not_kept()

    async def aiter_raw(self, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        raise self.not_kept()
        yield b""  # type: ignore[unreachable]  # makes this an async generator
