"""The reference server as an ASGI application, for uvicorn or any ASGI server.

The core is synchronous SQLite work, so each request runs in a worker thread
(`anyio.to_thread`), leaving the event loop free to accept and answer other requests
while one waits on an external system. The lifespan starts an optional background
recovery loop (worker sweep and reaper) and an optional webhook delivery loop, and
stops them on shutdown.

Breaking a connection without a response is not something ASGI can express: an app
that fails before responding gets a 500 from the server, not silence. Under the live
runner (`serve`, `idemclient server`) the server's protocol registers each connection's
transport in the lifespan state, and the app closes that transport itself: the client
sees the connection end with no response bytes, exactly as when a worker dies. Under
another ASGI server the app falls back to starting a response it never finishes, which
a client also sees as a broken connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import anyio
import anyio.to_thread

from .._protocol.messages import DropConnection, ServerRequest, ServerResponse
from .._protocol.rules import MAX_BODY_BYTES, Problem
from .._storage.rows import StorageDown

__all__ = ["CONNECTIONS_STATE_KEY", "ReferenceApp"]

logger = logging.getLogger("idemclient.testing")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Lifespan-state key under which the live runner's protocol keeps {peer: transport}.
CONNECTIONS_STATE_KEY = "idemclient.connections"
# Worker threads for requests. Gates and delays park a thread; keep headroom so 100
# concurrent clients do not queue behind a handful of parked ones.
DEFAULT_THREADS = 64


_UNEXPECTED = Problem(
    500,
    "internal-error",
    "Internal server error",
    "the server failed while handling this request; it may have been applied: retry with"
    " the same key",
    headers=(("retry-after", "5"),),
)


class _Server(Protocol):
    """What the app needs from the server (a `ReferenceServer`)."""

    def handle(self, request: ServerRequest) -> ServerResponse | DropConnection: ...

    def recover(self) -> object: ...

    def reap(self) -> object: ...

    def deliver_webhooks(self) -> object: ...


class ReferenceApp:
    """ASGI 3 application over a `ReferenceServer`.

    `recovery_interval`: seconds between background recovery sweeps (and reaps); None
    runs none, so a test can call recovery itself. `webhook_interval`: seconds between
    passes of the webhook delivery loop; None runs none. `on_ready` is called once the
    lifespan startup is complete (the live runner uses it to report readiness).
    """

    def __init__(
        self,
        server: _Server,
        *,
        recovery_interval: float | None = None,
        webhook_interval: float | None = None,
        on_ready: Callable[[], None] | None = None,
        threads: int = DEFAULT_THREADS,
    ) -> None:
        if recovery_interval is not None and not recovery_interval > 0:
            raise ValueError(f"recovery_interval must be positive, not {recovery_interval!r}")
        if webhook_interval is not None and not webhook_interval > 0:
            raise ValueError(f"webhook_interval must be positive, not {webhook_interval!r}")
        self.server = server
        self.recovery_interval = recovery_interval
        self.webhook_interval = webhook_interval
        self._on_ready = on_ready
        self._threads = threads
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        # websockets and anything else: not served; returning closes them.

    def _get_limiter(self) -> anyio.CapacityLimiter:
        # Created lazily: a limiter belongs to the running event loop.
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._threads)
        return self._limiter

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        async with anyio.create_task_group() as tasks:
            self._get_limiter()
            if self.recovery_interval is not None:
                tasks.start_soon(self._recovery_loop, self.recovery_interval)
            if self.webhook_interval is not None:
                tasks.start_soon(self._webhook_loop, self.webhook_interval)
            await send({"type": "lifespan.startup.complete"})
            if self._on_ready is not None:
                self._on_ready()
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            tasks.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})

    async def _recovery_loop(self, interval: float) -> None:
        limiter = self._get_limiter()
        while True:
            try:
                await anyio.to_thread.run_sync(self.server.recover, limiter=limiter)
                await anyio.to_thread.run_sync(self.server.reap, limiter=limiter)
            except StorageDown as down:
                # An outage, said once a sweep in a line, not a traceback a second.
                logger.warning("background recovery sweep skipped: %s", down)
            except Exception:
                # A failed sweep must not end the loop: leases expire, the next one retries.
                logger.exception("background recovery sweep failed")
            await anyio.sleep(interval)

    async def _webhook_loop(self, interval: float) -> None:
        # Its own task and thread: a slow receiver delays the next pass, never a payment.
        limiter = self._get_limiter()
        while True:
            try:
                await anyio.to_thread.run_sync(self.server.deliver_webhooks, limiter=limiter)
            except StorageDown as down:
                logger.warning("background webhook delivery skipped: %s", down)
            except Exception:
                logger.exception("background webhook delivery failed")
            await anyio.sleep(interval)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            # Keep reading past the cap (so the connection stays in sync) but stop
            # storing: the core answers 413 from the first MAX_BODY_BYTES + 1 bytes.
            if len(body) <= MAX_BODY_BYTES:
                body += message.get("body", b"")
            more = message.get("more_body", False)
        request = ServerRequest(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=tuple(
                (name.decode("latin-1").lower(), value.decode("latin-1"))
                for name, value in scope.get("headers", ())
            ),
            body=bytes(body),
        )
        try:
            answer = await anyio.to_thread.run_sync(
                self.server.handle, request, limiter=self._get_limiter()
            )
        except Exception:
            # Every error is problem+json, an unforeseen one too (not the ASGI server's
            # text/plain 500). It may have been applied: a 500, retried with the key.
            logger.exception("%s %s failed", request.method, request.path)
            answer = _UNEXPECTED.response()
        if isinstance(answer, DropConnection):
            await self._drop(scope, receive, send)
            return
        if answer.delay > 0 and await _gone_within(answer.delay, receive):
            return  # the client stopped waiting (its timeout): nobody to answer
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        headers.append((b"content-length", str(len(answer.body)).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body, "more_body": False})

    async def _drop(self, scope: Scope, receive: Receive, send: Send) -> None:
        connections = (scope.get("state") or {}).get(CONNECTIONS_STATE_KEY)
        peer = scope.get("client")
        transport = None
        if connections is not None and peer is not None:
            transport = connections.get(tuple(peer))
        if isinstance(transport, asyncio.BaseTransport):
            transport.close()
            # Wait for the server to notice the disconnect; otherwise it would see an
            # app that returned without responding and send a 500 of its own.
            with anyio.move_on_after(5):
                while (await receive())["type"] != "http.disconnect":
                    pass
            return
        # Fallback: promise a body and never send it; the server must cut the connection.
        await send(
            {"type": "http.response.start", "status": 500, "headers": [(b"content-length", b"1")]}
        )


async def _gone_within(seconds: float, receive: Receive) -> bool:
    """Hold an answer `seconds` (a `delay` fault), or until the client disconnects;
    whether it did. A client that timed out has closed its connection: the request
    stays applied, and a server shutting down (a test's teardown) is not held up."""
    with anyio.move_on_after(seconds):
        while (await receive())["type"] != "http.disconnect":
            pass
        return True
    return False
