"""A request turned into an `Intent`: its body buffered, its key found or made, its
fingerprint taken, before anything is recorded or sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Iterable

import httpx

from ._errors import InvalidKey, MissingKey, RequestNotReplayable
from ._fingerprint import body_type, fingerprint
from ._frame import Pairs, read_headers, values_of
from ._frozen import fast_constructor
from ._keys import new_key, one_key
from ._profile import Resolved
from ._redaction import redact_url
from ._settings import CALL_OPTIONS, CallOptions
from ._store._base import Intent
from .profiles import DEFAULT as DEFAULT_PROFILE

__all__ = [
    "KEY_HEADER",
    "abody_from_chunks",
    "body_from_chunks",
    "buffered_body",
    "check_unread_key_header",
    "intent_for",
    "key_in",
]

KEY_HEADER = "Idempotency-Key"
_KEY_HEADER_NAME = KEY_HEADER.lower()

#: What reading a caller's body can raise: a file opened write-only or in text mode, a
#: closed file, a generator httpx has already consumed.
_UNREADABLE = (OSError, ValueError, TypeError, httpx.StreamError)


class _BodyBuffer:
    """A request body being buffered so that every attempt can send it again.

    At most `limit` bytes are held: a longer body is refused as soon as it is seen to be
    too long, not after it has all been read into memory.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, chunk: object) -> None:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise RequestNotReplayable(
                f"the request body yielded {type(chunk).__name__}, not bytes: send bytes,"
                " or open a file in binary mode"
            )
        self.size += len(chunk)
        if self.size > self.limit:
            raise RequestNotReplayable(
                f"request body is over max_request_body ({self.limit} bytes): it must be"
                " buffered to be sent again with the same key; raise the limit or send less"
            )
        self.parts.append(bytes(chunk))

    def body(self) -> bytes:
        return b"".join(self.parts)


def _unreadable(error: BaseException) -> RequestNotReplayable:
    """The error for a body whose reading failed (chained to the cause by the caller)."""
    return RequestNotReplayable(
        f"the request body could not be read ({type(error).__name__}: {error}), so it"
        " cannot be buffered and sent again with the same key; nothing was recorded or sent"
    )


def body_from_chunks(chunks: Iterable[bytes], limit: int) -> bytes:
    """Buffer a request body so that every attempt can send it again, up to `limit`."""
    buffer = _BodyBuffer(limit)
    iterator = iter(chunks)
    while True:
        try:
            chunk = next(iterator)
        except StopIteration:
            return buffer.body()
        except _UNREADABLE as exc:
            raise _unreadable(exc) from exc
        buffer.add(chunk)


async def abody_from_chunks(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """`body_from_chunks` for an async body."""
    buffer = _BodyBuffer(limit)
    iterator = aiter(chunks)
    while True:
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            return buffer.body()
        except _UNREADABLE as exc:
            raise _unreadable(exc) from exc
        buffer.add(chunk)


def buffered_body(request: httpx.Request, limit: int) -> bytes | None:
    """The body if httpx already holds it in memory, else None (stream it in)."""
    try:
        content = request.content
    except httpx.RequestNotRead:
        return None
    if type(content) is bytes and len(content) <= limit:
        return content  # already whole and immutable: nothing to copy
    return body_from_chunks((content,), limit)


def intent_for(request: httpx.Request, body: bytes, resolved: Resolved | None = None) -> Intent:
    """The intent a request stands for. A caller that registers operations ahead of
    sending them (a batch) builds them here too, so the fingerprints agree. `resolved`:
    the profile's facts for it (where its key is, what a key may be); the generic
    profile's when not given."""
    options = request.extensions.get(CALL_OPTIONS)
    if options is not None and not isinstance(options, CallOptions):
        raise TypeError(f"request extension {CALL_OPTIONS!r} must be CallOptions")
    if resolved is None:
        resolved = DEFAULT_PROFILE.resolve(request.method, request.url.path, frozenset())
    # Read once (httpx decodes every header on each read); names come lowercased.
    headers = read_headers(request.headers)
    given = _key_given(headers, body, resolved)
    key = resolved.check_key(given) if given is not None else resolved.check_key(new_key())
    if given is None and resolved.key.header is None:
        raise MissingKey(
            None,
            f"the {resolved.profile.name} profile's server reads the key from the"
            f" {resolved.key.where}, and this request's body has none: put it there"
            " (idemclient's Client does, from key= or a new one)",
        )
    operation_id = options.operation_id if options else None
    if operation_id is None:
        operation_id = key
    elif not isinstance(operation_id, str) or not operation_id:
        # An empty id is not an id left out: issued again, it would be paid again under
        # a new key. Bytes would be another id than the same text.
        raise InvalidKey(operation_id, _OPERATION_ID)
    if len(operation_id) > 1024:
        raise InvalidKey(operation_id, _OPERATION_ID)
    reference = options.reference if options else None
    if reference is not None and not isinstance(reference, str):
        # Stored as it came (a number as text, bytes as a blob), a look-up by it would
        # ask for another value than the one the request carries.
        raise TypeError(
            f"reference= must be a string (the end-to-end reference a look-up asks for),"
            f" not {type(reference).__name__}; nothing was recorded or sent"
        )
    # Stored and fingerprinted without credentials: no user or password, no value of a
    # secret-looking query parameter (see `_redaction`).
    url = redact_url(request.url)
    method = request.method
    return _new_intent(
        operation_id=operation_id,
        key=key,
        key_given=given is not None,
        method=method,
        url=str(url),
        headers=tuple(headers),
        body=body,
        fingerprint=fingerprint(method, url, body, **body_type(headers, lowercase=True)),
        reference=reference,
        profile=resolved.profile.name,
    )


_OPERATION_ID = "an operation id (operation_id=, or the key) must be a string of 1..1024 characters"

#: `Intent(...)` without a call per field (see `_frozen`): one per operation.
_new_intent = fast_constructor(Intent)


def key_in(request: httpx.Request, body: bytes, resolved: Resolved) -> str | None:
    """The key `request` carries where its profile's server reads it, or None. A key in
    the `Idempotency-Key` header where the server reads it elsewhere is refused (see
    `check_unread_key_header`)."""
    return _key_given(read_headers(request.headers), body, resolved)


def _key_given(headers: Pairs, body: bytes, resolved: Resolved) -> str | None:
    """`key_in`, of a request whose headers are `headers` (`read_headers`)."""
    given = _key_in_slot(headers, body, resolved)
    slot = resolved.key
    if slot.header is None or slot.header.lower() != _KEY_HEADER_NAME:
        unread = values_of(headers, _KEY_HEADER_NAME)
        _check_unread(resolved, unread, [] if given is None else [(f"the {slot.where}", given)])
    return given


def check_unread_key_header(
    resolved: Resolved, headers: httpx.Headers, given: list[tuple[str, str]]
) -> None:
    """Refuse a key in the `Idempotency-Key` header where the profile's server reads its
    key elsewhere (PayPal's `PayPal-Request-Id`, Square's body field...), before anything
    is recorded. `given`: the keys given where that server reads one (where, key).

    The caller who wrote that header meant it as the payment's key, but that server never
    sees it: with none where it looks, the request would go with a key of the client's
    making, another in every store (the same payment asked again from another machine is
    a second payment there); with another one there, two keys for one request. The same
    key in both places is one key."""
    slot = resolved.key
    if slot.header is not None and slot.header.lower() == _KEY_HEADER_NAME:
        return
    _check_unread(resolved, headers.get_list(KEY_HEADER), given)


def _check_unread(resolved: Resolved, unread: list[str], given: list[tuple[str, str]]) -> None:
    """`check_unread_key_header`, where the `Idempotency-Key` header's values are
    `unread` (and the profile's server reads its key elsewhere)."""
    if not unread:
        return
    slot = resolved.key
    if not given:
        raise MissingKey(
            unread[0],
            f"it is in the {KEY_HEADER} header, which the {resolved.profile.name} profile's"
            f" server does not read (it reads the {slot.where}): sent so, the payment would"
            " go under a key of the client's making, another one from every store. Put"
            f" your key in the {slot.where} (a Client also takes it as key=); nothing was"
            " recorded or sent",
        )
    one_key([*given, *((f"the {KEY_HEADER} header", value) for value in unread)])


def _key_in_slot(headers: Pairs, body: bytes, resolved: Resolved) -> str | None:
    slot = resolved.key
    if slot.header is not None:
        given = values_of(headers, slot.header.lower())
        if len(given) == 1:
            return slot.key_from_header(given[0])
        # The header given more than once: one key, or two for one request (refused).
        return one_key((f"the {slot.header} header", slot.key_from_header(v)) for v in given)
    assert slot.field is not None
    try:
        document = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if not isinstance(document, dict):
        raise MissingKey(
            None,
            f"the {resolved.profile.name} profile's server reads the key from the"
            f" {slot.where}, and this request's body is not a JSON object: nothing was"
            " recorded or sent",
        )
    value = document.get(slot.field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidKey(value, f"the body's {slot.field!r} must be a string")
    return value
