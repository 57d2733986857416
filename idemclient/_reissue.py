"""An operation issued again is sent as it was recorded: its body's bytes and its
`Content-Type`, whatever bytes of the same meaning the caller built this time.

Two requests that mean the same thing are one operation (`_fingerprint`): JSON members
in another order, a new multipart boundary, another JSON encoder after an upgrade. The
server need not think so. The IETF draft lets it tell two requests under one key apart
by a checksum of the payload, and django-idempotency-key keys its records by a hash of
the body's bytes: to them the other bytes are another request, refused (422: a payment
made reported failed) or run again (a second payment). So the request sent under a
recorded key is always the recorded one, as `resume()` sends it: the store keeps the
body of every operation until it is finished, and a finished one is answered from the
store, never sent. (A finished operation's body is reaped after the store's
retention; an earlier version's record whose body is gone matches only the very same
bytes, so what is sent is what was recorded either way.)

Where the bytes are replaced:

- before httpx's auth flow and request hooks run (`as_recorded`, from the `send` that
  `wrap()` installs, which `Client` goes through too), when one of them may read the
  body (an auth flow that signs it): it then signs the bytes that are sent. This costs
  one read of the store for each request that names an operation, so it is done only
  there: an auth flow of httpx's own (basic, digest, netrc) never reads the body;
- else in the transport, once the store has admitted the operation (`recorded_body`,
  `send_recorded`), with no read of its own. Should something above the transport have
  read the bytes there (the operation recorded by another process between that read
  and the admission), the request is refused before it is sent (`refusal`): a
  signature over other bytes would not match. A transport used without `wrap()` knows
  nothing above it: it replaces the bytes.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx

from ._errors import IdemError, OperationMismatch
from ._intent import abody_from_chunks, body_from_chunks, buffered_body, intent_for, key_in
from ._retrofit import replace_body
from ._settings import CALL_OPTIONS, CallOptions, Settings
from ._store import OperationRecord
from ._store._rows import mismatch
from ._worker import to_thread

__all__ = [
    "aas_recorded",
    "as_recorded",
    "may_read_body",
    "recorded_body",
    "refusal",
    "send_recorded",
]

#: httpx's own auth flows, none of which reads the request's body (digest's `auth-int`,
#: which would, is not implemented by httpx).
_BODY_BLIND = (httpx.BasicAuth, httpx.DigestAuth, httpx.NetRCAuth)


def recorded_body(record: OperationRecord, body: bytes) -> bytes | None:
    """The body to send for an operation issued again with `body`, in place of it: the
    recorded one, if the record holds one other than `body`; else None (the request's
    own bytes are the recorded ones, or the operation recorded none)."""
    if record.body and record.body != body:
        return record.body
    return None


def send_recorded(request: httpx.Request, record: OperationRecord) -> None:
    """Make `request` (in the transport) carry `record`'s body and `Content-Type`."""
    replace_body(request, record.body)
    headers = request.headers
    for name in ("content-type", "content-length", "transfer-encoding"):
        headers.pop(name, None)
    _put_types(headers, _content_types(record))
    headers["Content-Length"] = str(len(record.body))


def refusal(record: OperationRecord) -> OperationMismatch:
    """The error for an operation whose request must carry its recorded bytes, where
    something above the transport (an auth flow, a request hook) may have read (signed)
    the bytes the caller built: sent, the signature would not be the body's."""
    return OperationMismatch(
        f"operation {record.operation_id!r} (key {record.key!r}) is sent with the body"
        " it was recorded with, whose bytes are not this request's (their meaning is the"
        " same); an auth flow or a request hook of this client may have read (signed)"
        " this request's bytes already, so nothing was sent. Issue it again (the recorded"
        " bytes are then put in before the auth flow runs), or resume() it",
        operation_id=record.operation_id,
        key=record.key,
    )


def may_read_body(client: httpx.Client | httpx.AsyncClient, auth: Any) -> bool:
    """Something of the caller's that runs between `client.send()` and the transport
    may read the request's body: an auth flow other than httpx's basic, digest and
    netrc ones (`auth` as `send` was given it), or a request event hook."""
    if client.event_hooks.get("request"):
        return True
    if auth is httpx.USE_CLIENT_DEFAULT:
        auth = client.auth
    if auth is None or isinstance(auth, tuple):  # a tuple is basic auth
        return False
    return type(auth) not in _BODY_BLIND


def named(settings: Settings, request: httpx.Request) -> str | None:
    """The operation a request names (its operation id, or a key it was given), which
    the store may hold already; None for a request that is no operation, names none (a
    new key will be made for it), or that the transport will refuse anyway."""
    options = request.extensions.get(CALL_OPTIONS)
    try:
        resolved = settings.resolve(request)
        if not resolved.keyed:
            return None
        if isinstance(options, CallOptions) and options.operation_id:
            return options.operation_id
        if resolved.key.header is not None:
            return key_in(request, b"", resolved)
        return key_in(request, request.content, resolved)
    except (IdemError, ValueError, httpx.RequestNotRead):
        return None  # refused, with its reason, by the transport


def as_recorded(settings: Settings, request: httpx.Request) -> httpx.Request:
    """`request`, or the request to hand to httpx in its place, where it names an
    unfinished operation recorded with a body (see `rebuilt`). Reads the store (and a
    body httpx streams): for a request an auth flow that may read the body will see."""
    operation_id = named(settings, request)
    if operation_id is None:
        return request
    record = _sendable(settings.store.get(operation_id))
    if record is None:
        return request
    body = buffered_body(request, settings.max_request_body)
    if body is not None:
        return rebuilt(settings, request, record, body, streamed=False)
    stream = request.stream
    if not isinstance(stream, httpx.SyncByteStream):
        raise TypeError("a sync client needs a request with a sync body")
    body = body_from_chunks(stream, settings.max_request_body)
    return rebuilt(settings, request, record, body, streamed=True)


async def aas_recorded(settings: Settings, request: httpx.Request) -> httpx.Request:
    """`as_recorded`, the store read in a worker thread."""
    operation_id = named(settings, request)
    if operation_id is None:
        return request
    record = _sendable(await to_thread(functools.partial(settings.store.get, operation_id)))
    if record is None:
        return request
    body = buffered_body(request, settings.max_request_body)
    if body is not None:
        return rebuilt(settings, request, record, body, streamed=False)
    stream = request.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise TypeError("an async client needs a request with an async body")
    body = await abody_from_chunks(stream, settings.max_request_body)
    return rebuilt(settings, request, record, body, streamed=True)


def _sendable(record: OperationRecord | None) -> OperationRecord | None:
    """`record`, if its operation may be sent (a finished one is answered from the
    store) and it holds a body."""
    if record is None or record.state.finished or not record.body:
        return None
    return record


def rebuilt(
    settings: Settings,
    request: httpx.Request,
    record: OperationRecord,
    body: bytes,
    *,
    streamed: bool,
) -> httpx.Request:
    """The request to hand to httpx in place of `request`, whose body is `body`: with
    `record`'s body and content type if it is that operation's request by meaning and
    its bytes differ; else `request` as it is, or with `body` in place of the stream it
    was read from (`streamed`). The transport refuses another meaning, in its words."""
    recorded = recorded_body(record, body)
    if recorded is not None and _same_operation(settings, request, body, record):
        return _request_with(request, recorded, _content_types(record))
    if streamed:
        return _request_with(request, body, request.headers.get_list("content-type"))
    return request


def _same_operation(
    settings: Settings, request: httpx.Request, body: bytes, record: OperationRecord
) -> bool:
    try:
        intent = intent_for(request, body, settings.resolve(request))
    except (IdemError, ValueError):
        return False  # refused, with its reason, by the transport
    return mismatch(intent, record, sending=False) is None


def _request_with(request: httpx.Request, body: bytes, content_types: list[str]) -> httpx.Request:
    headers = httpx.Headers(request.headers)
    for name in ("content-type", "content-length", "transfer-encoding"):
        headers.pop(name, None)
    _put_types(headers, content_types)
    return httpx.Request(
        request.method, request.url, headers=headers, content=body, extensions=request.extensions
    )


def _content_types(record: OperationRecord) -> list[str]:
    """The `Content-Type` values the operation was recorded with, in their order: a
    type given twice is sent again twice, so that the one its fingerprint read (the
    last, see `_fingerprint.body_type`) is the one it reads again."""
    return [value for name, value in record.headers if name.lower() == "content-type"]


def _put_types(headers: httpx.Headers, content_types: list[str]) -> None:
    """Give `headers` (which hold none) each of `content_types`, in order."""
    if len(content_types) == 1:
        headers["Content-Type"] = content_types[0]
    elif content_types:
        headers.update([("Content-Type", value) for value in content_types])
