"""What a client writes to send an operation, on a SQL store: `begin` (an intent admitted,
or the stored one claimed), `claim`, an attempt recorded, `finish`, `settle`, and the
takeover of a lease (`_claim_found`), fenced by its owner.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._db.dialect import Connection
from .._errors import OperationMismatch
from .._frozen import fast_constructor
from .._outcome import State
from .._server_time import DATE_RESOLUTION, ServerTime
from .._time import LEASE_MARGIN, lease_holds
from ._base import (
    OVER_A_REFUSAL,
    UNSETTLED_BY_A_LATER_SEND,
    Begin,
    Claim,
    Durability,
    Finished,
    Intent,
    OperationRecord,
    Progress,
    StoredResponse,
    holder_is_live,
    new_finished,
    owner_sent_until,
    whole,
)
from ._owners import owner_is_dead
from ._rows import as_stored, dump_headers, mismatch
from ._sql_base import SQLBase
from ._sql_written import admission_values, admitted, returned, server_sent

__all__ = ["SQLSending"]


#: `Begin(...)` without a call per field (see `_frozen`): every new operation's.
_new_begin = fast_constructor(Begin)


class SQLSending(SQLBase):
    """What a client writes to send an operation: see the module docstring."""

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        # The intent's server time, read as it was recorded, is the time now as well.
        known = intent.server_created_at
        server = None if known is None else ServerTime(known, known + DATE_RESOLUTION)
        headers, withheld = self.header_rule.split_request(intent.headers)
        if self._admit(
            admission_values(
                intent,
                dump_headers(headers, withheld),
                State.IN_FLIGHT,
                owner,
                lease_until,
                now,
                cipher=self._cipher,
            )
        ):
            # The record just written, without reading it back.
            return _new_begin(
                Claim.CREATED,
                admitted(
                    intent,
                    headers,
                    withheld=withheld,
                    owner=owner,
                    now=now,
                    lease_until=lease_until,
                ),
            )
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._find_for(conn, intent)
            return self._claim_found(
                conn, record, owner=owner, now=now, lease_until=lease_until, server_time=server
            )

    def claim(
        self,
        operation_id: str,
        *,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool = False,
        server_time: ServerTime | None = None,
    ) -> Begin:
        with self._transaction(durable=self.durability is Durability.FULL) as conn:
            record = self._fetch(conn, operation_id)
            return self._claim_found(
                conn,
                record,
                owner=owner,
                now=now,
                lease_until=lease_until,
                look_up=look_up,
                server_time=server_time,
            )

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._write(durable=self.durability is Durability.FULL) as conn:
            cursor = conn.execute(
                self._sql.record_attempt,
                (
                    progress.attempts,
                    progress.maybe_applied,
                    progress.evidence,
                    progress.not_before,
                    lease_until,
                    progress.now,
                    progress.sent_at,
                    progress.sent_at,
                    *server_sent(progress),
                    progress.replay_unexplained,
                    operation_id,
                    owner,
                ),
            )
            return cursor.rowcount == 1

    def finish(
        self,
        operation_id: str,
        *,
        owner: str,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
        known: OperationRecord | None = None,
        drop_answer: bool = False,
    ) -> OperationRecord:
        return whole(
            self.finish_brief(
                operation_id,
                owner=owner,
                state=state,
                progress=progress,
                response=response,
                known=known,
                drop_answer=drop_answer,
            )
        )

    def finish_brief(
        self,
        operation_id: str,
        *,
        owner: str,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
        known: OperationRecord | None = None,
        drop_answer: bool = False,
    ) -> Finished | OperationRecord:
        kept, response_values = as_stored(
            response,
            self.header_rule,
            self.max_stored_body,
            cipher=self._cipher,
            operation_id=operation_id,
        )
        now = progress.now
        final = state.finished
        # Unsettled with no answer given: the row keeps the answer it has (see
        # `Statements.finish`), unless it is dropped (its columns written empty).
        answered = final or response is not None or drop_answer
        # A final answer ends any wait the server asked for.
        not_before = None if final else progress.not_before
        # Unsettled, and maybe applied by this caller or by anyone before: indeterminate.
        if_maybe = state if final else State.INDETERMINATE
        params: tuple[Any, ...] = (
            progress.maybe_applied,
            if_maybe.value,
            state.value,
            progress.attempts,
            progress.maybe_applied,
            progress.evidence,
            progress.evidence,
            OVER_A_REFUSAL,
            not_before,
            *(response_values if answered else ()),
            now,
            now if final else None,  # finished_at
            progress.sent_at,
            progress.sent_at,
            *server_sent(progress),
            progress.replay_unexplained,
            operation_id,
        )
        # The guard names the owner, or the state a final answer writes (a success
        # lands over a refusal too: see `Statements.finish`) and whether its caller
        # knew the operation may have been applied (`_guards.refusal_judged_blind`).
        params += (state.value, progress.maybe_applied, state.value) if final else (owner,)
        # Told from what the caller knew only while its lease holds (by a margin, for a
        # host whose clock is a little ahead): a final answer lands whoever holds the
        # lease, and over a row another caller took over meanwhile it is that row (its
        # "maybe applied", by the other's attempts) that the caller is told.
        answer_from = (
            known
            if self._answer_from_known
            and known is not None
            and known.lease_owner == owner
            and lease_holds(known.lease_expires, now + LEASE_MARGIN)
            else None
        )
        with self._write(durable=self.durability is Durability.FULL) as conn:
            if answer_from is None:
                row = returned(conn.execute(self._sql.finish_returning[final, answered], params))
                if row is not None:
                    return self._record(row)
            elif conn.execute(self._sql.finish[final, answered], params).rowcount == 1:
                # Landed as asked: what it wrote, the record made only if asked for.
                maybe_applied = answer_from.maybe_applied or progress.maybe_applied
                return new_finished(
                    operation_id,
                    answer_from.key,
                    if_maybe if maybe_applied else state,
                    progress.attempts,
                    maybe_applied,
                    progress.evidence,
                    not_before,
                    kept if answered else answer_from.response,
                    answer_from,
                    progress,
                )
            # Not written as asked (a final answer was there first, or the lease moved
            # on): the stored row is the truth, and keeps what this caller learnt.
            if not final:
                self._merge(conn, operation_id, progress)
            return dataclasses.replace(self._fetch(conn, operation_id), lease_lost=True)

    #: declared: `finish_brief` is the brief form of this `finish` (`BriefFinish`); a
    #: subclass that overrides `finish`, and does not declare again, is asked by its own
    finish_brief_of = finish

    def _merge(self, conn: Connection, operation_id: str, progress: Progress) -> None:
        conn.execute(
            self._sql.merge,
            (
                progress.maybe_applied,
                progress.sent_at is not None,
                progress.sent_at,
                UNSETTLED_BY_A_LATER_SEND,
                progress.maybe_applied,
                progress.attempts,
                progress.attempts,
                progress.now,
                progress.sent_at,
                progress.sent_at,
                *server_sent(progress),
                progress.replay_unexplained,
                operation_id,
                progress.sent_at is not None,
                progress.sent_at,
            ),
        )

    def settle(
        self,
        operation_id: str,
        *,
        owner: str,
        applied: bool,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
        state: State = State.SUCCEEDED,
    ) -> OperationRecord:
        if applied:
            if not state.finished:
                raise ValueError(f"an applied operation is settled as final, not {state.words}")
            _kept, columns = as_stored(
                response or StoredResponse.of(200, (), b""),
                self.header_rule,
                self.max_stored_body,
                cipher=self._cipher,
                operation_id=operation_id,
            )
            # Found made, or found declined: each lands where the table says.
            succeeded = state is State.SUCCEEDED
            statement = self._sql.settle_applied if succeeded else self._sql.settle_declined
            values: tuple[Any, ...] = (state.value, *columns, now)
        elif state is State.FAILED:
            statement = self._sql.settle_refused
            values = (State.FAILED.value, now)
        else:
            statement = self._sql.settle_not_applied
            values = (State.NOT_SENT.value,)
        with self._write(durable=self.durability is Durability.FULL) as conn:
            row = returned(conn.execute(statement, (*values, evidence, now, operation_id, owner)))
            return self._record(row) if row is not None else self._fetch(conn, operation_id)

    def _find_for(self, conn: Connection, intent: Intent) -> OperationRecord:
        """The stored operation matching `intent`, which must be the same request."""
        row = conn.execute(
            self._sql.find_for, (intent.operation_id, intent.key, intent.operation_id)
        ).fetchone()
        if row is None:  # deleted between the insert and this read: a purge raced us
            raise KeyError(f"operation {intent.operation_id!r} vanished from {self.path!r}")
        record = self._record(row)
        reason = mismatch(intent, record)
        if reason is not None:
            raise OperationMismatch(reason, operation_id=intent.operation_id, key=record.key)
        return record

    def _claim_found(
        self,
        conn: Connection,
        record: OperationRecord,
        *,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool = False,
        server_time: ServerTime | None = None,
    ) -> Begin:
        """Lease `record`, just read in this transaction, unless it is finished or a
        live owner holds it; `look_up`: for a look-up (see `OperationStore.claim`).
        `server_time`: the server's time now, if the caller knows it (see
        `Statements.take_over`)."""
        if record.state.finished:
            return Begin(Claim.FINISHED, record)
        holder = record.lease_owner
        # Judged once, before the lease is taken: what the claim says of its holder
        # must be what it was when taken (see `Begin.holder_dead`).
        dead = holder is not None and owner_is_dead(holder)
        if not dead and holder_is_live(record, now=now):
            return Begin(Claim.BUSY, record)
        # Taken from an owner in flight: it may have sent until now or its lease's end.
        # A look-up's lease is never in flight: nothing was sent under it.
        sent_until = owner_sent_until(record, now=now)
        row = returned(
            conn.execute(
                self._sql.take_over,
                (
                    not look_up,
                    owner,
                    lease_until,
                    look_up,
                    now,
                    State.IN_FLIGHT.value,
                    sent_until,
                    sent_until,
                    State.PENDING.value,
                    None if server_time is None else server_time.low,
                    sent_until is not None,
                    None if server_time is None else server_time.high,
                    record.operation_id,
                    holder,
                ),
            )
        )
        if row is None:
            return Begin(Claim.BUSY, record)
        # A look-up that held it sent nothing: no attempt of its to wait for.
        sender = holder is not None and not record.lease_look_up
        return Begin(
            Claim.CLAIMED,
            self._record(row),
            taken_over=sender,
            prior=record,
            dead_holder=holder if sender and dead else None,
        )
