"""A `WebhookReceiver` as a WSGI application (PEP 3333), for any WSGI server.

Headers come from the environ's ``HTTP_*`` keys. A WSGI server joins a repeated header
into one comma-separated value: a message id is then read as the several values it is
and refused as under ASGI (`malformed`), and a signature header gives two timestamps,
refused too, as they should be.

The body is read by its Content-Length. A body sent without one (chunked) is read to
the end only when the server says the input ends where the body does
(``wsgi.input_terminated``, set by gunicorn, Waitress, Werkzeug's development server
and others that decode chunked bodies); otherwise reading past a body's end would
block on a kept-alive connection. Without either, the answer is 411 Length Required:
reading nothing would refuse a genuine delivery as forged, every time it came.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ._answers import Receiving, WebhookResponse, refuse, refuse_too_large, reply

__all__ = ["WSGIApp", "wsgi_app"]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _headers(environ: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = [
        (key[5:].replace("_", "-").lower(), str(value))
        for key, value in environ.items()
        if key.startswith("HTTP_")
    ]
    if "CONTENT_TYPE" in environ:
        pairs.append(("content-type", str(environ["CONTENT_TYPE"])))
    return pairs


#: How much is asked of the input at a time when reading it to its end.
_PIECE = 64 * 1024


def _read_body(environ: dict[str, Any], sender: str, max_body: int) -> bytes | WebhookResponse:
    """The request's body, or the answer to send instead (411, 413), logged."""
    stream = environ["wsgi.input"]
    declared = environ.get("CONTENT_LENGTH")
    if declared is None or declared == "":
        if not environ.get("wsgi.input_terminated"):
            detail = (
                "a Content-Length is needed: this server does not say where a body sent"
                " without one ends"
            )
            return refuse(sender, detail, reply(411, "invalid", None, detail=detail))
        # Read to the end, but never hold more than the limit and one piece.
        body = bytearray()
        while piece := stream.read(_PIECE):
            body += piece
            if len(body) > max_body:
                return refuse_too_large(sender, max_body)
        return bytes(body)
    try:
        length = int(declared)
    except ValueError:
        length = -1
    if length < 0:
        detail = "a valid Content-Length is needed"
        return refuse(sender, detail, reply(411, "invalid", None, detail=detail))
    if length > max_body:
        return refuse_too_large(sender, max_body)
    return stream.read(length) if length else b""


def wsgi_app(receiver: Receiving) -> WSGIApp:
    """A WSGI application that answers every POST with `receiver.handle`."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        response: WebhookResponse
        if environ.get("REQUEST_METHOD") != "POST":
            response = reply(405, "invalid", None, detail="webhooks are delivered by POST")
        else:
            # Unreadable (411) or too large (413): that answer, not the receiver's.
            body_or_answer = _read_body(environ, receiver.sender, receiver.max_body)
            match body_or_answer:
                case bytes() as body:
                    response = receiver.handle(_headers(environ), body)
                case answer:
                    response = answer
        reason = _REASONS.get(response.status, "Unknown")
        headers = [*response.headers, ("content-length", str(len(response.body)))]
        start_response(f"{response.status} {reason}", headers)
        return [response.body]

    return app
