"""A `WebhookReceiver` as an ASGI 3 application.

The inbox's work is synchronous database work, and the handler may be too, so each
delivery runs in a worker thread (`anyio.to_thread`): the event loop keeps serving
other requests meanwhile. The response is sent only after the commit returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread

from ._answers import Receiving, WebhookResponse, refuse_too_large, reply

__all__ = ["ASGIApp", "asgi_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _declared_length(scope: Scope) -> int:
    """The request's `Content-Length`, or -1 when it has none (a chunked body) or one
    the server let through unread as a number (the body's own size then decides)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return -1


def asgi_app(receiver: Receiving) -> ASGIApp:
    """An ASGI application that answers every POST with `receiver.handle`."""

    async def send_response(send: Send, response: WebhookResponse) -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        headers.append((b"content-length", str(len(response.body)).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # Nothing to start or stop; answering lets any server run with lifespan on.
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            response = reply(405, "invalid", None, detail="webhooks are delivered by POST")
            await send_response(send, response)
            return
        if _declared_length(scope) > receiver.max_body:
            # Known from the headers: answered at once, the body left unread (as the WSGI
            # app does), not taken in up to the limit first.
            await send_response(send, refuse_too_large(receiver.sender, receiver.max_body))
            return
        body = bytearray()
        too_large = False
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the sender gave up; it will redeliver
            chunk = message.get("body", b"")
            # Keep reading to the end (so the connection stays usable) but stop storing.
            if not too_large:
                body += chunk
                too_large = len(body) > receiver.max_body
            more = message.get("more_body", False)
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope.get("headers", ())
        ]
        if too_large:
            response = refuse_too_large(receiver.sender, receiver.max_body)
        else:
            response = await anyio.to_thread.run_sync(receiver.handle, headers, bytes(body))
        await send_response(send, response)

    return app
