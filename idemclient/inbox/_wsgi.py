"""A `WebhookReceiver` as a WSGI application (PEP 3333), for any WSGI server.

Headers come from the environ's ``HTTP_*`` keys. A WSGI server joins a repeated header
into one comma-separated value; for the message id that fails validation and for the
signature it gives two timestamps, so both are refused, as they should be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._webhook import WebhookReceiver

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


def wsgi_app(receiver: WebhookReceiver[Any]) -> WSGIApp:
    """A WSGI application that answers every POST with `receiver.handle`."""
    from ._webhook import WebhookResponse, _answer

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        response: WebhookResponse
        if environ.get("REQUEST_METHOD") != "POST":
            response = _answer(405, "invalid", None, detail="webhooks are delivered by POST")
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = -1
            if length < 0:
                response = _answer(411, "invalid", None, detail="a valid Content-Length is needed")
            elif length > receiver.max_body:
                response = _answer(
                    413, "too_large", None, detail=f"at most {receiver.max_body} bytes"
                )
            else:
                body = environ["wsgi.input"].read(length) if length else b""
                response = receiver.handle(_headers(environ), body)
        reason = _REASONS.get(response.status, "Unknown")
        headers = [*response.headers, ("content-length", str(len(response.body)))]
        start_response(f"{response.status} {reason}", headers)
        return [response.body]

    return app
