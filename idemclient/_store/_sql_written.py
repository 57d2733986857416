"""The values a SQL store's write takes, and the record it wrote, known without reading
it back: an intent's admission, a finish, the server's time at a send.
"""

from __future__ import annotations

from typing import Any

from .._db.dialect import Cursor
from .._frozen import fast_constructor
from .._outcome import State
from ._base import (
    Headers,
    Intent,
    OperationRecord,
    Progress,
    finished_record,
    latest,
    server_sent_after,
)
from ._cipher import PLAIN, Cipher

__all__ = [
    "admission_values",
    "admitted",
    "finished_record",
    "latest",
    "returned",
    "server_sent",
    "server_sent_after",
]


def admission_values(
    intent: Intent,
    headers: str,
    state: State,
    owner: str | None,
    lease_until: float | None,
    now: float,
    *,
    cipher: Cipher = PLAIN,
) -> tuple[Any, ...]:
    """The values of `Statements.admit` (`INSERT_COLUMNS`), headers already as stored,
    the body and its fingerprint sealed by `cipher`."""
    body, fingerprint = intent.body, intent.fingerprint
    if cipher.enabled:
        where = {"operation_id": intent.operation_id}
        body = cipher.seal(body, column="body", **where)
        fingerprint = cipher.seal_text(fingerprint, column="fingerprint", **where)
    return (
        intent.operation_id,
        intent.key,
        intent.method,
        intent.url,
        headers,
        body,
        fingerprint,
        intent.reference,
        state.value,
        owner,
        lease_until,
        now,
        now,
        intent.profile,
        intent.server_created_at,
    )


def admitted(
    intent: Intent,
    headers: Headers,
    *,
    withheld: tuple[str, ...] = (),
    owner: str,
    now: float,
    lease_until: float,
) -> OperationRecord:
    """The record an admission just wrote, without reading it back (every field by
    position, in the record's order: a test holds it to the row)."""
    return _new_record(
        intent.operation_id,
        intent.key,
        intent.method,
        intent.url,
        headers,
        intent.body,
        intent.fingerprint,
        intent.reference,
        State.IN_FLIGHT,
        0,  # attempts
        False,  # maybe_applied
        "",  # evidence
        None,  # not_before
        owner,
        lease_until,
        None,  # response
        now,  # created_at
        now,  # updated_at
        None,  # finished_at
        withheld,
        intent.profile,
        None,  # clock_stepped
        None,  # sent_at
        False,  # lease_look_up
        False,  # replay_unexplained
        intent.server_created_at,
    )


#: `OperationRecord(...)`, built without a call per field (see `_frozen`).
_new_record = fast_constructor(OperationRecord)


def server_sent(progress: Progress) -> tuple[int, float | None, float | None]:
    """The values of a write's `server_sent_at` (see `Statements`): 1 and the server's
    time at the send it keeps (the later of it and the row's is kept, as `sent_at`); 2
    for a send whose server time the writer does not know (the row then keeps none: the
    one it has belongs to an earlier send); 0 for no send (the row's is kept)."""
    if progress.sent_at is None:
        return 0, None, None
    if progress.server_sent_at is None:
        return 2, None, None
    return 1, progress.server_sent_at, progress.server_sent_at


def returned(cursor: Cursor) -> Any:
    """The row an `UPDATE ... RETURNING` wrote, or None. Read with fetchall: sqlite3
    finishes the statement (and so its write) only once every row is read."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
