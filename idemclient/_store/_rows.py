"""What every store backend shares: the columns of an operation, turning rows into
records and back, which headers are never written, and when a stored operation is not
the one an intent asks for."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._outcome import State
from ._base import Headers, Intent, OperationRecord, StoredResponse

__all__ = [
    "COLUMNS",
    "DEFAULT_SECRET_HEADERS",
    "as_stored",
    "dump_headers",
    "mismatch",
    "record_from_row",
    "redact",
]

#: Never written to a store, in requests or responses. On resume, the live client
#: supplies its credentials again.
DEFAULT_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
#: Not part of the request's meaning; recomputed when the request is rebuilt.
_TRANSIENT_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "idempotency-key"}
)

#: Every column of an operation, in the order `record_from_row` reads them.
COLUMNS = (
    "id, key, method, url, headers, body, fingerprint, reference, state, attempts,"
    " maybe_applied, evidence, not_before, lease_owner, lease_expires, status_code,"
    " response_headers, response_body, response_sha256, response_size, created_at,"
    " updated_at, finished_at"
)


def redact(headers: Headers, secret: frozenset[str]) -> Headers:
    """`headers` without the secret and the transient ones."""
    return tuple(
        (name, value)
        for name, value in headers
        if (lowered := name.lower()) not in secret and lowered not in _TRANSIENT_HEADERS
    )


def as_stored(
    response: StoredResponse | None, secret: frozenset[str], max_body: int
) -> tuple[StoredResponse | None, tuple[Any, ...]]:
    """A response as a store keeps it (secret headers gone; over `max_body`, the body
    kept only as its size and hash, so the table never becomes a blob store), and the
    values of its five columns: status, headers, body, sha256, size."""
    if response is None:
        return None, (None, None, None, None, None)
    headers = redact(response.headers, secret)
    body = response.body if response.body_size <= max_body else b""
    kept = StoredResponse(
        response.status_code, headers, body, response.body_sha256, response.body_size
    )
    return kept, (kept.status_code, dump_headers(headers), body, kept.body_sha256, kept.body_size)


def dump_headers(headers: Headers) -> str:
    return json.dumps([list(pair) for pair in headers], separators=(",", ":"))


def _headers(value: Any) -> Headers:
    """Headers as stored: JSON text (SQLite) or already decoded (PostgreSQL jsonb)."""
    if not value:
        return ()
    pairs = json.loads(value) if isinstance(value, str | bytes) else value
    return tuple((str(name), str(val)) for name, val in pairs)


def record_from_row(row: Sequence[Any]) -> OperationRecord:
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
    ) = row
    response = None
    if status_code is not None:
        response = StoredResponse(
            status_code=status_code,
            headers=_headers(response_headers),
            body=bytes(response_body or b""),
            body_sha256=response_sha256 or "",
            body_size=response_size or 0,
        )
    return OperationRecord(
        operation_id=operation_id,
        key=key,
        method=method,
        url=url,
        headers=_headers(headers),
        body=bytes(body),
        fingerprint=fingerprint,
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
    )


def mismatch(intent: Intent, record: OperationRecord) -> str | None:
    """Why `record` cannot be the operation `intent` asks for, or None if it is."""
    if record.operation_id != intent.operation_id:
        return (
            f"key {intent.key!r} already belongs to operation {record.operation_id!r};"
            f" it cannot be used for operation {intent.operation_id!r}"
        )
    if intent.key_given and record.key != intent.key:
        return (
            f"operation {intent.operation_id!r} was recorded with key {record.key!r},"
            f" not {intent.key!r}; a recorded key is never replaced"
        )
    if record.fingerprint != intent.fingerprint:
        return (
            f"operation {intent.operation_id!r} (key {record.key!r}) was recorded for"
            f" {record.method} {record.url} with another body; refusing to send a"
            " different request under it"
        )
    return None
