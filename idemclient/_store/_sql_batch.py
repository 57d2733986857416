"""What the batch asks of a SQL store beyond sending: a registration's conflicts (and the
error that refuses it whole), a row found on the server recorded settled, a corrected
row reopened, the references held, the look-ups' "none" kept, the bodies' digests, and
the requests a run finds again by their references.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._db.dialect import Connection
from .._errors import OperationMismatch
from .._outcome import State
from ._base import Durability, Headers, Intent, NotFound, OperationRecord, StoredResponse
from ._rows import as_stored, intent_from_row, mismatch
from ._sql_base import FIND_CHUNK, SQLBase, chunked
from ._sql_written import admission_values, returned

__all__ = ["SQLBatch", "refused"]


class SQLBatch(SQLBase):
    """What the batch writes and reads beyond sending: see the module docstring."""

    def record_settled(
        self,
        intent: Intent,
        *,
        state: State,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
    ) -> OperationRecord:
        if not state.finished:
            raise ValueError(
                f"an operation found on the server is recorded final, not {state.words}"
            )
        _kept, answer = as_stored(
            response or StoredResponse.of(200, (), b""),
            self.header_rule,
            self.max_stored_body,
            cipher=self._cipher,
            operation_id=intent.operation_id,
        )
        values = admission_values(
            intent, self._stored_headers(intent), state, None, None, now, cipher=self._cipher
        )
        sql = self._sql
        with self._write(durable=self.durability is Durability.FULL) as conn:
            conn.execute(sql.record_settled, (*values, evidence, *answer, now))
            # Written now, or there first: the stored row answers, if it is this request.
            row = conn.execute(
                sql.find_for, (intent.operation_id, intent.key, intent.operation_id)
            ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self.path!r}")
        record = self._record(row)
        reason = mismatch(intent, record, sending=False)
        if reason is not None:
            raise OperationMismatch(reason, operation_id=intent.operation_id, key=record.key)
        return record

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        where = {"operation_id": intent.operation_id}
        values = (
            intent.url,
            self._stored_headers(intent),
            self._cipher.seal(intent.body, column="body", **where),
            self._cipher.seal_text(intent.fingerprint, column="fingerprint", **where),
            State.PENDING.value,
            evidence,
            now,
            intent.operation_id,
            intent.key,
        )
        # Durable like an intent: the request about to be sent is this one.
        with self._write(durable=self.durability is not Durability.BUFFERED) as conn:
            row = returned(conn.execute(self._sql.reopen, values))
        return None if row is None else self._record(row)

    def references(
        self, *, after: tuple[str, str] | None = None, limit: int = 5_000
    ) -> Sequence[tuple[str, str]]:
        sql = self._sql
        with self._use() as conn:
            if after is None:
                rows = conn.execute(sql.references_first, (limit,)).fetchall()
            else:
                reference, operation_id = after
                rows = conn.execute(
                    sql.references_from, (reference, reference, operation_id, limit)
                ).fetchall()
        return [(str(reference), str(operation_id)) for reference, operation_id in rows]

    def remember_not_found(self, answers: Iterable[NotFound], *, now: float) -> None:
        rows = [(a.operation_id, a.key, a.url, a.reading, a.asked_at, a.server_at) for a in answers]
        if not rows:
            return
        with self._transaction(durable=False) as conn:
            for values in rows:
                conn.execute(self._sql.remember_not_found, values)
            conn.execute(self._sql.advance, (now,))

    def not_found(self, operation_ids: Iterable[str]) -> Sequence[NotFound]:
        sql = self._sql
        found: list[NotFound] = []
        with self._use() as conn:
            for chunk in chunked(operation_ids, FIND_CHUNK):
                found += (
                    NotFound(*row)
                    for row in conn.execute(sql.not_found, (sql.dialect.values(chunk),))
                )
        return found

    def forget_not_found(self, *, asked_before: float) -> int:
        with self._write(durable=False) as conn:
            return int(conn.execute(self._sql.forget_not_found_before, (asked_before,)).rowcount)

    def note_contents(self, digests: Iterable[tuple[str, str]]) -> None:
        # Under a key where bodies are encrypted: a digest in clear would confirm a
        # guessed payment (see `Cipher.blind`).
        rows = [(operation_id, self._cipher.blind(digest)) for operation_id, digest in digests]
        if not rows:
            return
        with self._transaction(durable=False) as conn:
            for values in rows:
                conn.execute(self._sql.note_content, values)

    def find_contents(self, digests: Iterable[str]) -> Sequence[tuple[str, str]]:
        sql = self._sql
        asked: dict[str, str] = {}  # as stored -> as given
        for digest in digests:
            for blinded in self._cipher.blinds(digest):
                asked[blinded] = digest
        found: list[tuple[str, str]] = []
        with self._use() as conn:
            for chunk in chunked(asked, FIND_CHUNK):
                for stored, operation_id in conn.execute(
                    sql.find_contents, (sql.dialect.values(chunk),)
                ):
                    found.append((asked[stored], operation_id))
        return found

    def undigested(self, *, id_prefix: str, limit: int, after: str = "") -> Sequence[Intent]:
        sql = self._sql
        with self._use() as conn:
            rows = conn.execute(
                sql.undigested, (after, len(id_prefix), id_prefix, limit)
            ).fetchall()
        headers: dict[object, Headers] = {}
        return [intent_from_row(row, self._cipher, headers) for row in rows]

    def find_requests(self, *, reference_tails: Iterable[str]) -> Sequence[Intent]:
        sql = self._sql
        with self._use() as conn:
            # A store that holds no reference (a batch's first run) has no request to
            # find: the tails, every value of every row of a file, are not even read.
            if conn.execute(sql.any_reference).fetchone() is None:
                return []
            # Deduplicated once and encoded at once: only the encoded list is held while
            # the statement runs.
            tails = list(dict.fromkeys(reference_tails))
            if not tails:
                return []
            wanted = sql.dialect.values(tails)
            del tails
            # One statement: each chunk of tails would cost a pass over the references.
            rows = conn.execute(sql.find_tail_requests, (wanted,)).fetchall()
        # The rows of a batch share their headers: each distinct text is read once.
        headers: dict[object, Headers] = {}
        return [intent_from_row(row, self._cipher, headers) for row in rows]

    def _conflicts(self, conn: Connection, intents: Sequence[Intent]) -> list[tuple[str, str, str]]:
        """(operation id, key, why) for each of `intents` stored before for another
        request. `conn` sees the rows just inserted for them: those match themselves."""
        values = self._sql.dialect.values
        existing = [
            self._record(row)
            for row in conn.execute(
                self._sql.existing,
                (values([i.operation_id for i in intents]), values([i.key for i in intents])),
            ).fetchall()
        ]
        by_id = {r.operation_id: r for r in existing}
        by_key = {r.key: r for r in existing}
        conflicts = []
        for intent in intents:
            record = by_id.get(intent.operation_id) or by_key.get(intent.key)
            # Registering sends nothing: only the request itself must be the same.
            reason = None if record is None else mismatch(intent, record, sending=False)
            if reason is not None:
                conflicts.append((intent.operation_id, intent.key, reason))
        return conflicts


def refused(conflicts: Sequence[tuple[str, str, str]]) -> OperationMismatch:
    """The error for a registration that found `conflicts` (see `SQLStore._conflicts`),
    raised inside its transaction so that nothing of it is kept."""
    first_id, first_key, first_reason = conflicts[0]
    return OperationMismatch(
        f"{len(conflicts)} operation(s) were recorded before for other"
        f" requests; nothing was registered. First: {first_reason}",
        operation_id=first_id,
        key=first_key,
        conflicts=tuple((operation_id, reason) for operation_id, _key, reason in conflicts),
    )
