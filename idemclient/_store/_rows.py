"""What every store backend shares: the columns of an operation, turning rows into
records and back (headers split by the rule of `_redaction`, values sealed by the
store's `Cipher`), and when a stored operation is not the one an intent asks for."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import httpx

from .._fingerprint import body_type, bytes_fingerprint, fingerprint, is_current
from .._outcome import State
from .._redaction import (
    DEFAULT_SECRET_HEADERS,
    HeaderRule,
    display_name,
    missing_headers,
    origin_of,
    redact_url,
    secret_query_names,
)
from ._base import Headers, Intent, OperationRecord, StoredResponse, new_stored_response
from ._cipher import PLAIN, Cipher

__all__ = [
    "COLUMNS",
    "DEFAULT_MAX_STORED_BODY",
    "DEFAULT_SECRET_HEADERS",
    "REQUEST_COLUMNS",
    "as_stored",
    "dump_headers",
    "intent_from_row",
    "mismatch",
    "record_from_row",
]

#: Response bodies up to this size are kept whole: far above any single API object (a
#: payment, a payout, a refund is a few KiB; a page of a hundred of them a few hundred),
#: and the same bound as a request body (`max_request_body`), so that an answer given
#: back from the store is the answer. A larger one keeps its size and sha256 only.
DEFAULT_MAX_STORED_BODY = 1024 * 1024

#: Every column of an operation, in the order `record_from_row` reads them.
COLUMNS = (
    "id, key, method, url, headers, body, fingerprint, reference, state, attempts,"
    " maybe_applied, evidence, not_before, lease_owner, lease_expires, status_code,"
    " response_headers, response_body, response_sha256, response_size, created_at,"
    " updated_at, finished_at, profile, clock_stepped, sent_at, lease_look_up,"
    " replay_unexplained, server_created_at, server_sent_at"
)


#: The columns of an operation's request, in the order `intent_from_row` reads them.
REQUEST_COLUMNS = "id, key, method, url, headers, body, fingerprint, reference, profile"


def as_stored(
    response: StoredResponse | None,
    rule: HeaderRule,
    max_body: int,
    *,
    cipher: Cipher = PLAIN,
    operation_id: str = "",
) -> tuple[StoredResponse | None, tuple[Any, ...]]:
    """A response as a store keeps it (secret headers gone; over `max_body`, the body
    kept only as its size and hash, so the table never becomes a blob store), and the
    values of its five columns: status, headers, body, sha256, size (the body and its
    hash sealed by `cipher`)."""
    if response is None:
        return None, (None, None, None, None, None)
    headers = rule.response(response.headers)
    body = response.body if response.body_size <= max_body else b""
    kept = new_stored_response(
        response.status_code, headers, body, response.body_sha256, response.body_size
    )
    sealed_body, sealed_sha256 = body, kept.body_sha256
    if cipher.enabled:
        where = {"operation_id": operation_id}
        # An empty body (nothing, or not kept) holds nothing to hide.
        if body:
            sealed_body = cipher.seal(body, column="response body", **where)
        sealed_sha256 = cipher.seal_text(sealed_sha256, column="response sha256", **where)
    return kept, (
        kept.status_code,
        dump_headers(headers),
        sealed_body,
        sealed_sha256,
        kept.body_size,
    )


def dump_headers(headers: Headers, withheld: Sequence[str] = ()) -> str:
    """Headers as stored: JSON pairs; a withheld header's value is null (its name is
    kept, never its value)."""
    if isinstance(headers, tuple) and isinstance(withheld, tuple):
        # A client's requests store the same headers each time: encoded once.
        return _dumped(headers, withheld)
    return _dump(headers, withheld)


def _dump(headers: Headers, withheld: Sequence[str]) -> str:
    pairs: list[list[str | None]] = [[name, value] for name, value in headers]
    pairs += [[name, None] for name in withheld]
    return _COMPACT.encode(pairs)


_dumped = functools.lru_cache(maxsize=256)(_dump)


#: `json.dumps(..., separators=(",", ":"))`, without building an encoder per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def _headers(value: Any) -> tuple[Headers, tuple[str, ...]]:
    """Headers as stored (JSON text in SQLite, already decoded from PostgreSQL's jsonb):
    the pairs with values, and the names withheld."""
    if not value:
        return (), ()
    pairs = json.loads(value) if isinstance(value, str | bytes) else value
    kept = tuple((str(name), str(val)) for name, val in pairs if val is not None)
    withheld = tuple(str(name) for name, val in pairs if val is None)
    return kept, withheld


def record_from_row(row: Sequence[Any], cipher: Cipher = PLAIN) -> OperationRecord:
    """The record a row holds, its sealed values opened by `cipher`."""
    (
        operation_id,
        key,
        method,
        url,
        headers,
        body,
        fingerprint,
        reference,
        state,
        attempts,
        maybe_applied,
        evidence,
        not_before,
        lease_owner,
        lease_expires,
        status_code,
        response_headers,
        response_body,
        response_sha256,
        response_size,
        created_at,
        updated_at,
        finished_at,
        profile,
        clock_stepped,
        sent_at,
        lease_look_up,
        replay_unexplained,
        server_created_at,
        server_sent_at,
    ) = row
    where = {"operation_id": operation_id}
    response = None
    if status_code is not None:
        response = StoredResponse(
            status_code=status_code,
            headers=_headers(response_headers)[0],
            body=cipher.open(bytes(response_body or b""), column="response body", **where),
            body_sha256=cipher.open_text(response_sha256 or "", column="response sha256", **where),
            body_size=response_size or 0,
        )
    kept, withheld = _headers(headers)
    return OperationRecord(
        operation_id=operation_id,
        key=key,
        method=method,
        url=url,
        headers=kept,
        body=cipher.open(bytes(body), column="body", **where),
        fingerprint=cipher.open_text(fingerprint, column="fingerprint", **where),
        reference=reference,
        state=State(state),
        attempts=attempts,
        maybe_applied=bool(maybe_applied),
        evidence=evidence,
        not_before=not_before,
        lease_owner=lease_owner,
        lease_expires=lease_expires,
        response=response,
        created_at=created_at,
        updated_at=updated_at,
        finished_at=finished_at,
        withheld_headers=withheld,
        profile=profile,
        clock_stepped=clock_stepped,
        sent_at=sent_at,
        # A look-up's lease never makes an operation in flight: one in flight is under a
        # send's lease, whatever the mark says (a process of the previous version, whose
        # statements know no mark, may have taken a look-up's lease as a send).
        lease_look_up=bool(lease_look_up) and state != State.IN_FLIGHT.value,
        replay_unexplained=bool(replay_unexplained),
        server_created_at=server_created_at,
        server_sent_at=server_sent_at,
    )


def intent_from_row(
    row: Sequence[Any], cipher: Cipher = PLAIN, read: dict[object, Headers] | None = None
) -> Intent:
    """The request a row (`REQUEST_COLUMNS`) was recorded to send, its sealed values
    opened by `cipher`; its key was the caller's or the store's, as recorded. `read`
    keeps the headers already read, by their stored text, for many rows at once."""
    operation_id, key, method, url, headers, body, fingerprint, reference, profile = row
    where = {"operation_id": operation_id}
    known = read.get(headers) if read is not None and isinstance(headers, str) else None
    if known is None:
        known = _headers(headers)[0]
        if read is not None and isinstance(headers, str):
            read[headers] = known
    return Intent(
        operation_id=operation_id,
        key=key,
        key_given=True,
        method=method,
        url=url,
        headers=known,
        body=cipher.open(bytes(body), column="body", **where),
        fingerprint=cipher.open_text(fingerprint, column="fingerprint", **where),
        reference=reference,
        profile=profile,
    )


def mismatch(intent: Intent, record: OperationRecord, *, sending: bool = True) -> str | None:
    """Why `record` cannot be the operation `intent` asks for, or None if it is.

    `sending`: the intent is about to be sent, so it must also carry every header the
    operation was sent with and the store withheld (a registration sends nothing).
    """
    if record.operation_id != intent.operation_id:
        return (
            f"key {intent.key!r} already belongs to operation {record.operation_id!r};"
            f" it cannot be used for operation {intent.operation_id!r}"
        )
    name = f"operation {intent.operation_id!r} (key {record.key!r})"
    if intent.key_given and record.key != intent.key:
        return (
            f"operation {intent.operation_id!r} was recorded with key {record.key!r},"
            f" not {intent.key!r}; a recorded key is never replaced"
        )
    was_under, asked_under = record.profile or "generic", intent.profile or "generic"
    if was_under != asked_under:
        return (
            f"{name} was sent under the {was_under} server profile; this client speaks"
            f" {asked_under}. Nothing was sent: an operation is never sent on under"
            " another profile (its key may be where that server does not look). Use a"
            f" client with profile={was_under!r} for it"
        )
    bound, asked = origin_of(record.url), origin_of(intent.url)
    if bound != asked:
        return (
            f"{name} is bound to {bound}, where it was first sent; this request goes to"
            f" {asked}. Nothing was sent: re-issuing never moves an operation to another"
            f" origin. To move it, resume it with origin={asked!r}"
        )
    if not same_request(intent, record):
        return (
            f"{name} was recorded for {record.method} {record.url}; this request differs in"
            f" {_differences(intent, record)}. Refusing to send a different request under it"
        )
    if sending and not record.state.finished:
        missing = missing_headers(record.withheld_headers, intent.headers)
        if missing:
            return (
                f"{name} was sent with the header(s)"
                f" {', '.join(display_name(h) for h in missing)}, which this request"
                " lacks. Their values are never stored: the live client supplies them (its"
                " headers=, auth= or cookies=), or the header is named in persist_headers."
                " Nothing was sent"
            )
    return None


def _differences(intent: Intent, record: OperationRecord) -> str:
    """What differs between two requests with different fingerprints, in words."""
    was, now = httpx.URL(record.url), httpx.URL(intent.url)
    found = []
    if record.method != intent.method:
        found.append(f"its method ({intent.method}, not {record.method})")
    if was.path != now.path:
        found.append(f"its path ({now.path}, not {was.path})")
    if was.query != now.query:
        lacking = [n for n in secret_query_names(was) if n not in secret_query_names(now)]
        if lacking:
            found.append(
                f"its query, which lacks {', '.join(lacking)} (a secret parameter's value is"
                " never stored: the live client supplies it, e.g. with params=)"
            )
        else:
            found.append(f"its query ({now.query.decode()!r}, not {was.query.decode()!r})")
    # A reaped record has no body left to compare: by elimination, it is the body.
    if not found and not record.body and not is_current(record.fingerprint):
        found.append(
            "its body: the record, written by an earlier version, keeps only a fingerprint"
            " of its body's bytes, so only the very same bytes are that request"
        )
    elif not found or (record.body and record.body != intent.body):
        found.append("its body")
    return " and ".join(found)


def same_request(intent: Intent, record: OperationRecord) -> bool:
    """`intent` is the request `record` was made for: the same method, path, query and
    body by meaning (see `_fingerprint`), judged by the rule its fingerprint was made
    with. An earlier version's fingerprint is over the bytes: the same bytes are the
    same request; so is a request of the same meaning as the record's own, where the
    record still holds the body (and the URL) that fingerprint was made over. Its URL
    is compared as stored now: an older store's may still hold a secret query value
    (fingerprinted with it), which every request now is without."""
    if record.fingerprint == intent.fingerprint:
        return True
    if is_current(record.fingerprint):
        return False  # one rule, two meanings
    if bytes_fingerprint(intent.method, httpx.URL(intent.url), intent.body) == record.fingerprint:
        return True
    stored = httpx.URL(record.url)
    if bytes_fingerprint(record.method, stored, record.body) != record.fingerprint:
        return False  # its body reaped: only its bytes' fingerprint is left
    meant = fingerprint(record.method, redact_url(stored), record.body, **body_type(record.headers))
    return meant == intent.fingerprint
