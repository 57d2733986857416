"""The values a SQL store's write takes, and the record it wrote, known without reading
it back: an intent's admission, a finish, the server's time at a send.
"""

from __future__ import annotations

from typing import Any

from .._db.dialect import Cursor
from .._frozen import fast_constructor
from .._outcome import State
from ._base import Headers, Intent, OperationRecord, Progress, StoredResponse
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
    where = {"operation_id": intent.operation_id}
    return (
        intent.operation_id,
        intent.key,
        intent.method,
        intent.url,
        headers,
        cipher.seal(intent.body, column="body", **where),
        cipher.seal_text(intent.fingerprint, column="fingerprint", **where),
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
    """The record an admission just wrote, without reading it back."""
    return _new_record(
        operation_id=intent.operation_id,
        key=intent.key,
        method=intent.method,
        url=intent.url,
        headers=headers,
        body=intent.body,
        fingerprint=intent.fingerprint,
        reference=intent.reference,
        state=State.IN_FLIGHT,
        attempts=0,
        maybe_applied=False,
        evidence="",
        not_before=None,
        lease_owner=owner,
        lease_expires=lease_until,
        response=None,
        created_at=now,
        updated_at=now,
        finished_at=None,
        withheld_headers=withheld,
        profile=intent.profile,
        server_created_at=intent.server_created_at,
    )


#: `OperationRecord(...)`, built without a call per field (see `_frozen`): an admission
#: and a finish build one each, for every operation.
_new_record = fast_constructor(OperationRecord)


def finished_record(
    known: OperationRecord,
    *,
    state: State,
    attempts: int,
    maybe_applied: bool,
    evidence: str,
    not_before: float | None,
    response: StoredResponse | None,
    updated_at: float,
    finished_at: float | None,
    sent_at: float | None,
    replay_unexplained: bool = False,
    server_sent_at: float | None = None,
) -> OperationRecord:
    """`known` as `finish` just wrote it, lease released: `dataclasses.replace`
    spelled out, which costs a quarter as much on the hottest path of the library (a
    test checks that every other field is carried over)."""
    return _new_record(
        operation_id=known.operation_id,
        key=known.key,
        method=known.method,
        url=known.url,
        headers=known.headers,
        body=known.body,
        fingerprint=known.fingerprint,
        reference=known.reference,
        state=state,
        attempts=attempts,
        maybe_applied=maybe_applied,
        evidence=evidence,
        not_before=not_before,
        lease_owner=None,
        lease_expires=None,
        lease_look_up=False,
        response=response,
        created_at=known.created_at,
        updated_at=updated_at,
        finished_at=finished_at,
        withheld_headers=known.withheld_headers,
        profile=known.profile,
        clock_stepped=known.clock_stepped,
        sent_at=sent_at,
        replay_unexplained=replay_unexplained,
        server_created_at=known.server_created_at,
        server_sent_at=server_sent_at,
    )


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


def server_sent_after(stored: OperationRecord, progress: Progress) -> float | None:
    """`server_sent_at` as `server_sent` has the row write it."""
    if progress.sent_at is None:
        return stored.server_sent_at
    if progress.server_sent_at is None:
        return None
    return latest(stored.server_sent_at, progress.server_sent_at)


def latest(stored: float | None, sent: float | None) -> float | None:
    """The later of two times, either of which may be unknown (as `_FINISH` writes it)."""
    if stored is None or sent is None:
        return sent if stored is None else stored
    return max(stored, sent)


def returned(cursor: Cursor) -> Any:
    """The row an `UPDATE ... RETURNING` wrote, or None. Read with fetchall: sqlite3
    finishes the statement (and so its write) only once every row is read."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
