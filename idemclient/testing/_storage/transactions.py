"""The transactions both storage backends run the same way, written once.

`Transactions` holds every phase write (`handler1` .. `release`), the takeover, the
look-ups, the webhook outbox and the external systems' books: the same logic on
SQLite and on PostgreSQL, so the fencing cannot drift apart between them. A backend
subclasses it with its `Statements` (see `_statements`) and its connections:

- `_write()`: one transaction, committed when the block ends, rolled back if it raises;
- `_read()`: a connection for reads;
- `_write_one()`: a connection for a single write statement, which commits on its own
  (autocommit: a statement is a transaction by itself, without BEGIN and COMMIT around
  it; the default is a transaction, for a backend that cannot);
- `_snapshot()`: one consistent view for several reads (by default `_read()`).

What a backend does its own way stays there: opening and closing, admission (SQLite
arbitrates with one transaction, PostgreSQL with an advisory lock across partitions),
reaping and reset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import ClassVar

from ..._db.dialect import Connection
from .._protocol.rules import Phase
from .rows import EventRow, ExternalRecord, KeyRow, LedgerRow, ResourceRow
from .statements import Statements

__all__ = ["Connection", "Transactions"]


class _LeaseLost(Exception):
    """The attempt no longer owns the row: roll the phase back, write nothing."""


class Transactions(ABC):
    """The shared half of a storage backend; see the module docstring."""

    _sql: ClassVar[Statements]

    @abstractmethod
    def _write(self) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _read(self) -> AbstractContextManager[Connection]: ...

    def _write_one(self) -> AbstractContextManager[Connection]:
        return self._write()

    def _snapshot(self) -> AbstractContextManager[Connection]:
        return self._read()

    # -- takeover ----------------------------------------------------------------------

    def take_over(
        self, *, client: str, key: str, owner: str, now: float, stale_before: float
    ) -> KeyRow | None:
        """Stamp a new lease on a started, stale row. None: someone else won or it moved on."""
        with self._write() as conn:
            row = conn.execute(
                self._sql.take_over, (now, owner, client, key, stale_before)
            ).fetchone()
        return None if row is None else KeyRow(*row)

    # -- phases: each one transaction, fenced by the lease owner -----------------------

    def handler1(
        self, *, client: str, key: str, owner: str, now: float, resource: ResourceRow
    ) -> bool:
        """Create the resource and commit H1_DONE together."""
        sql = self._sql
        try:
            with self._write() as conn:
                _fenced(
                    conn,
                    sql.advance_h1,
                    (Phase.H1_DONE.value, now, resource.id, client, key, owner),
                )
                conn.execute(
                    sql.insert_resource,
                    (
                        resource.id,
                        resource.kind,
                        resource.client,
                        resource.idempotency_key,
                        resource.reference,
                        resource.amount,
                        resource.currency,
                        resource.status,
                        resource.fields,
                        resource.created_at,
                    ),
                )
                conn.execute(sql.journal, (resource.id, "H1", now))
        except _LeaseLost:
            return False
        return True

    def mark_sent(self, *, client: str, key: str, owner: str, now: float, point: Phase) -> bool:
        """Commit the intent to call an external system (EXTn_SENT), before the call.
        One statement, so one transaction by itself."""
        try:
            with self._write_one() as conn:
                _fenced(conn, self._sql.mark_sent, (point.value, now, now, client, key, owner))
        except _LeaseLost:
            return False
        return True

    def record_external(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        point: Phase,
        system: int,
        answer: str,
    ) -> bool:
        """Store an external system's answer on the resource and commit EXTn_DONE."""
        sql = self._sql
        try:
            with self._write() as conn:
                resource_id = _fenced(conn, sql.advance, (point.value, now, client, key, owner))
                conn.execute(sql.set_external[system], (answer, resource_id))
        except _LeaseLost:
            return False
        return True

    def handler2(self, *, client: str, key: str, owner: str, now: float, status: str) -> bool:
        """Handler2's work (the resource's new status) and H2_DONE together."""
        sql = self._sql
        try:
            with self._write() as conn:
                resource_id = _fenced(
                    conn, sql.advance, (Phase.H2_DONE.value, now, client, key, owner)
                )
                conn.execute(sql.set_status, (status, resource_id))
                conn.execute(sql.journal, (resource_id, "H2", now))
        except _LeaseLost:
            return False
        return True

    def finish(
        self,
        *,
        client: str,
        key: str,
        owner: str,
        now: float,
        status: str,
        response_code: int,
        response_body: bytes,
        events: Sequence[EventRow] = (),
    ) -> bool:
        """Handler3: final status, stored response, state finished, lease cleared, and
        the webhook events queued in their order, all in one transaction (the outbox:
        events exist exactly when their resource is final)."""
        sql = self._sql
        try:
            with self._write() as conn:
                resource_id = _fenced(
                    conn, sql.finish, (response_code, response_body, client, key, owner)
                )
                conn.execute(sql.set_status, (status, resource_id))
                conn.execute(sql.journal, (resource_id, "H3", now))
                for event in events:
                    conn.execute(
                        sql.insert_event,
                        (
                            event.id,
                            event.client,
                            event.type,
                            event.resource_id,
                            event.body,
                            event.created_at,
                            event.next_attempt_at,
                        ),
                    )
        except _LeaseLost:
            return False
        return True

    def release(self, *, client: str, key: str, owner: str, now: float) -> bool:
        """Give the lease up without finishing, so the next actor may take over at once.
        `last_attempt_at` stays the time the instruction was last marked sent: a resumer
        needs it to know whether an external system may have forgotten it since."""
        try:
            with self._write() as conn:
                _fenced(conn, self._sql.release, (client, key, owner))
        except _LeaseLost:
            return False
        return True

    def forget(self, *, client: str, key: str, created_before: float) -> bool:
        """Delete a finished key created at or before `created_before` (never a started
        one): a server profile's retention, applied when the key comes again, or an
        answer its provider does not keep. Whether a row went."""
        with self._write() as conn:
            cursor = conn.execute(self._sql.forget, (client, key, created_before))
            return bool(cursor.rowcount)

    # -- reads -------------------------------------------------------------------------

    def key_row(self, client: str, key: str) -> KeyRow | None:
        with self._read() as conn:
            row = conn.execute(self._sql.select_key, (client, key)).fetchone()
        return None if row is None else KeyRow(*row)

    def resource(self, resource_id: str) -> ResourceRow | None:
        with self._read() as conn:
            row = conn.execute(self._sql.select_resource, (resource_id,)).fetchone()
        return None if row is None else ResourceRow(*row)

    def find_resources(
        self,
        *,
        client: str,
        kind: str,
        resource_id: str | None = None,
        reference: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[ResourceRow]:
        """The caller's own resources of one kind matching every filter given."""
        given = [
            (column, value)
            for column, value in (
                ("id", resource_id),
                ("reference", reference),
                ("idempotency_key", idempotency_key),
            )
            if value is not None
        ]
        statement = self._sql.find_resources([column for column, _ in given])
        with self._read() as conn:
            rows = conn.execute(statement, (client, kind, *(value for _, value in given)))
            return [ResourceRow(*row) for row in rows.fetchall()]

    def stale_keys(self, *, stale_before: float, limit: int) -> list[tuple[str, str]]:
        """Started rows whose lease expired or was released, oldest first."""
        with self._read() as conn:
            rows = conn.execute(self._sql.stale, (stale_before, limit)).fetchall()
        return [(client, key) for client, key in rows]

    # -- the webhook outbox ------------------------------------------------------------

    def due_events(self, *, now: float, limit: int) -> list[EventRow]:
        """Pending events due at `now`, soonest first."""
        with self._read() as conn:
            rows = conn.execute(self._sql.due_events, (now, limit)).fetchall()
        return [EventRow(*row) for row in rows]

    def claim_event(self, event: EventRow, *, until: float) -> bool:
        """Hold `event` (as read) for one deliverer until `until`. False: someone else has it."""
        with self._write_one() as conn:
            cursor = conn.execute(self._sql.claim_event, (until, event.id, event.next_attempt_at))
            return cursor.rowcount == 1

    def postpone_event(self, event_id: str, *, until: float) -> None:
        """Make a pending event due at `until` (no attempt is counted)."""
        with self._write_one() as conn:
            conn.execute(self._sql.postpone_event, (until, event_id))

    def event_result(
        self,
        event_id: str,
        *,
        state: str,
        posts: int,
        next_attempt_at: float,
        delivered_at: float | None,
        status: int | None,
        error: str | None,
    ) -> None:
        """Record one delivery attempt: delivered, abandoned, or pending until later."""
        with self._write_one() as conn:
            conn.execute(
                self._sql.event_result,
                (state, posts, next_attempt_at, delivered_at, status, error, event_id),
            )

    def events(self) -> list[EventRow]:
        """Every webhook event, oldest first."""
        with self._read() as conn:
            rows = conn.execute(self._sql.all_events).fetchall()
        return [EventRow(*row) for row in rows]

    # -- the external systems' own books -----------------------------------------------

    def external_apply(
        self,
        *,
        system: int,
        key: str,
        resource_id: str,
        outcome: str,
        reference: str,
        amount: int,
        now: float,
    ) -> tuple[ExternalRecord, bool]:
        """Apply an instruction under `key` unless that key was seen. (record, applied now).
        One statement, so one transaction by itself."""
        with self._write_one() as conn:
            row = conn.execute(
                self._sql.external_apply,
                (system, key, resource_id, outcome, reference, amount, now),
            ).fetchone()
        assert row is not None
        record = ExternalRecord(*row)
        return record, record.calls == 1

    def external_lookup(self, *, system: int, key: str) -> ExternalRecord | None:
        with self._read() as conn:
            row = conn.execute(self._sql.external_lookup, (system, key)).fetchone()
        return None if row is None else ExternalRecord(*row)

    def external_forget(self, *, system: int, key: str, applied_before: float) -> bool:
        forgotten = f"{key}@forgotten-{applied_before!r}"
        with self._write() as conn:
            cursor = conn.execute(
                self._sql.external_forget, (forgotten, system, key, applied_before)
            )
            return bool(cursor.rowcount)

    # -- inspection --------------------------------------------------------------------

    def ledger_rows(self) -> list[LedgerRow]:
        """Every resource with its key state, effect counts and journal, oldest first."""
        sql = self._sql
        with self._snapshot() as conn:
            resources = [ResourceRow(*row) for row in conn.execute(sql.all_resources)]
            keys = {
                resource_id: (state, point)
                for resource_id, state, point in conn.execute(sql.ledger_keys)
            }
            effects: dict[tuple[str, int], tuple[int, int]] = {}
            for resource_id, system, applied, calls in conn.execute(sql.ledger_effects):
                effects[resource_id, system] = (int(applied), int(calls))
            journal: dict[str, list[str]] = {}
            for resource_id, step in conn.execute(sql.ledger_journal):
                journal.setdefault(resource_id, []).append(step)
        out: list[LedgerRow] = []
        for resource in resources:
            state, point = keys.get(resource.id, (None, None))
            e1 = effects.get((resource.id, 1), (0, 0))
            e2 = effects.get((resource.id, 2), (0, 0))
            out.append(
                (resource, state, point, (e1[0], e2[0], e1[1], e2[1]), journal.get(resource.id, []))
            )
        return out


def _fenced(conn: Connection, statement: str, params: tuple[object, ...]) -> str | None:
    """Run a phase's fenced update; its `resource_id`, or `_LeaseLost` if no row matched."""
    row = conn.execute(statement, params).fetchone()
    if row is None:
        raise _LeaseLost
    resource_id: str | None = row[0]
    return resource_id
