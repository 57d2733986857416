"""The reference server inside an httpx client: one transport for sync and async, and respx.

No socket is opened. A request goes straight to the server's `handle`, and the answer
comes back as the failure a real network would produce:

- `DropConnection` raises `httpx.RemoteProtocolError`, as a peer that closed the
  connection without answering does;
- a response delayed past the request's read timeout (`request.extensions["timeout"]`)
  advances the server's clock by that timeout and raises `httpx.ReadTimeout`. The server
  has already processed and committed the request by then, which is exactly the case
  a client must not report as "not charged". Nothing really sleeps.
"""

from __future__ import annotations

from typing import Protocol

import anyio.to_thread
import httpx

from .._machine.clock import ServerClock
from .._protocol.messages import DropConnection, ServerRequest, ServerResponse

__all__ = ["ReferenceTransport"]


class _Server(Protocol):
    @property
    def clock(self) -> ServerClock: ...

    def handle(self, request: ServerRequest) -> ServerResponse | DropConnection: ...


def _server_request(request: httpx.Request, body: bytes) -> ServerRequest:
    return ServerRequest(
        method=request.method,
        path=request.url.path,
        query=request.url.query.decode("ascii"),
        headers=tuple(
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in request.headers.raw
        ),
        body=body,
    )


class ReferenceTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An httpx transport (sync and async) answered by a reference server in-process.

    It is also a respx side effect: `respx.route(...).mock(side_effect=transport)`.
    """

    def __init__(self, server: _Server) -> None:
        self._server = server

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        return self._deliver(request, self._server.handle(_server_request(request, body)))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        # The core is synchronous SQLite work and may wait on a test's gate: keep it
        # off the event loop so other tasks (and the test itself) keep running.
        answer = await anyio.to_thread.run_sync(self._server.handle, _server_request(request, body))
        return self._deliver(request, answer)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        """The respx side-effect signature: request in, response out (or raise)."""
        return self.handle_request(request)

    def _deliver(
        self, request: httpx.Request, answer: ServerResponse | DropConnection
    ) -> httpx.Response:
        if isinstance(answer, DropConnection):
            raise httpx.RemoteProtocolError(
                f"Server disconnected without sending a response ({answer.reason}).",
                request=request,
            )
        if answer.delay > 0:
            timeouts = request.extensions.get("timeout", {})
            read_timeout = timeouts.get("read") if isinstance(timeouts, dict) else None
            if read_timeout is not None and answer.delay > read_timeout:
                self._server.clock.advance(read_timeout)
                raise httpx.ReadTimeout("timed out", request=request)
            self._server.clock.advance(answer.delay)
        return httpx.Response(
            answer.status,
            headers=list(answer.headers),
            content=answer.body,
            request=request,
        )
