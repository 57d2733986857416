"""What a client writes and reads to send an operation, in memory: `begin`, `claim`, an
attempt recorded, `finish`, `settle`, the takeover of a lease, and the look-ups by id,
key or reference, by the rules the SQL stores write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from .._errors import OperationMismatch
from .._outcome import State
from .._server_time import DATE_RESOLUTION, ServerTime
from .._states import Event, after
from ._base import (
    OVER_A_REFUSAL,
    UNSETTLED_BY_A_LATER_SEND,
    Begin,
    Claim,
    Intent,
    OperationRecord,
    Progress,
    StoredResponse,
    holder_is_live,
    owner_sent_until,
)
from ._guards import ATTEMPTED_IN, LEARNT_IN, SETTLED_IN, final_answer_lands, learns_over
from ._memory_rows import MemoryRows, latest
from ._owners import owner_is_dead
from ._rows import mismatch

__all__ = ["MemorySending"]


class MemorySending(MemoryRows):
    """What a client writes and reads to send an operation: see the module docstring."""

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        known = intent.server_created_at
        server = None if known is None else ServerTime(known, known + DATE_RESOLUTION)
        with self._open():
            found = self._found_for(intent)
            if found is None:
                record = self._new(intent, State.IN_FLIGHT, now, owner, lease_until)
                return Begin(Claim.CREATED, record)
            reason = mismatch(intent, found)
            if reason is not None:
                raise OperationMismatch(reason, operation_id=intent.operation_id, key=found.key)
            return self._claim(found, owner, now, lease_until, False, server)

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
        with self._open():
            record = self._fetch(operation_id)
            return self._claim(record, owner, now, lease_until, look_up, server_time)

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        with self._open():
            row = self._rows.get(operation_id)
            if (
                row is None
                or row.record.lease_owner != owner
                or row.record.state not in ATTEMPTED_IN
            ):
                return False
            stored = row.record
            self._put(
                stored,
                attempts=progress.attempts,
                maybe_applied=stored.maybe_applied or progress.maybe_applied,
                evidence=progress.evidence,
                not_before=progress.not_before,
                lease_expires=lease_until,
                updated_at=progress.now,
                **sends(stored, progress),
            )
            return True

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
        kept = self._kept(response)
        final = state.finished
        answered = final or response is not None or drop_answer
        with self._open():
            stored = self._fetch(operation_id)
            mine = (
                final_answer_lands(stored, state, knew=progress.maybe_applied)
                if final
                else stored.lease_owner == owner
            )
            if not mine:
                # Not written as asked: the stored record is the truth, and keeps what
                # this caller learnt (its attempts may have been applied).
                if not final and (
                    stored.finished_at is None
                    or learns_over(stored, progress.sent_at, reaped=self._rows[operation_id].reaped)
                ):
                    stored = self._merge(stored, progress)
                return dataclasses.replace(stored, lease_lost=True)
            maybe_applied = stored.maybe_applied or progress.maybe_applied
            evidence = progress.evidence
            if stored.finished_at is not None:  # a success over a refusal stored first
                evidence += OVER_A_REFUSAL + stored.evidence
            return self._put(
                stored,
                state=(state if final else State.INDETERMINATE) if maybe_applied else state,
                attempts=max(stored.attempts, progress.attempts),
                maybe_applied=maybe_applied,
                evidence=evidence,
                not_before=None if final else progress.not_before,
                lease_owner=None,
                lease_expires=None,
                lease_look_up=False,
                response=kept if answered else stored.response,
                updated_at=progress.now,
                finished_at=progress.now if final else None,
                **sends(stored, progress),
            )

    def _merge(self, stored: OperationRecord, progress: Progress) -> OperationRecord:
        maybe_applied = stored.maybe_applied or progress.maybe_applied
        state, evidence = stored.state, stored.evidence
        if stored.finished_at is not None:  # a refusal a later send unsettles
            state = after(state, Event.LEARNT_MAYBE_APPLIED)
            evidence += UNSETTLED_BY_A_LATER_SEND
        elif state in LEARNT_IN and maybe_applied:
            state = after(state, Event.LEARNT_MAYBE_APPLIED)
        return self._put(
            stored,
            state=state,
            evidence=evidence,
            finished_at=None,
            maybe_applied=maybe_applied,
            attempts=max(stored.attempts, progress.attempts),
            updated_at=progress.now,
            **sends(stored, progress),
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
        if applied and not state.finished:
            raise ValueError(f"an applied operation is settled as final, not {state.words}")
        with self._open():
            stored = self._fetch(operation_id)
            if applied and state is State.SUCCEEDED:  # found made: over a refusal too
                lands = final_answer_lands(stored, State.SUCCEEDED)
            else:
                lands = stored.state in SETTLED_IN
            if not lands or stored.lease_owner != owner:
                return stored
            changes: dict[str, object]
            if applied:
                answer = self._kept(response or StoredResponse.of(200, (), b""))
                changes = {"state": state, "response": answer, "finished_at": now}
            elif state is State.FAILED:
                if stored.response is None:  # refused keeps the answer it has: none here
                    return stored
                changes = {"state": State.FAILED, "maybe_applied": False, "finished_at": now}
            else:
                changes = {"state": State.NOT_SENT, "maybe_applied": False}
            return self._put(
                stored,
                evidence=evidence,
                not_before=None,
                lease_owner=None,
                lease_expires=None,
                lease_look_up=False,
                updated_at=now,
                **changes,
            )

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        ids = set(operation_ids)
        wanted = set(references)
        with self._open():
            return [
                row.record
                for row in self._rows.values()
                if row.record.operation_id in ids or row.record.reference in wanted
            ]

    def get(self, operation_id: str) -> OperationRecord | None:
        with self._open():
            row = self._rows.get(operation_id)
            return None if row is None else row.record

    def get_by_key(self, key: str) -> OperationRecord | None:
        with self._open():
            operation_id = self._by_key.get(key)
            return None if operation_id is None else self._rows[operation_id].record

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        with self._open():
            rows = [r for r in self._ordered() if r.finished_at is None]
        return rows[:limit] if limit is not None else rows

    def _claim(
        self,
        record: OperationRecord,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool,
        server_time: ServerTime | None,
    ) -> Begin:
        """Lease `record` unless it is finished or a live owner holds it (the rules of
        `OperationStore.claim`, as the SQL stores' takeover writes them)."""
        if record.state.finished:
            return Begin(Claim.FINISHED, record)
        holder = record.lease_owner
        # Judged once, before the lease is taken (see `Begin.dead_holder`).
        dead = holder is not None and owner_is_dead(holder)
        if not dead and holder_is_live(record, now=now):
            return Begin(Claim.BUSY, record)
        sent_until = owner_sent_until(record, now=now)
        in_flight = record.state is State.IN_FLIGHT
        state = after(record.state, Event.CLAIMED_TO_LOOK_UP if look_up else Event.CLAIMED)
        server_created_at = record.server_created_at
        if server_created_at is None and record.state is State.PENDING and server_time:
            server_created_at = server_time.low
        server_sent_at = record.server_sent_at
        if sent_until is not None:
            server_sent_at = None if server_time is None else server_time.high
        taken = self._put(
            record,
            state=state,
            lease_owner=owner,
            lease_expires=lease_until,
            lease_look_up=look_up,
            updated_at=now,
            maybe_applied=record.maybe_applied or in_flight,
            sent_at=latest(record.sent_at, sent_until),
            server_created_at=server_created_at,
            server_sent_at=server_sent_at,
        )
        # A look-up that held it sent nothing: no attempt of its to wait for.
        sender = holder is not None and not record.lease_look_up
        return Begin(
            Claim.CLAIMED,
            taken,
            taken_over=sender,
            prior=record,
            dead_holder=holder if sender and dead else None,
        )


def sends(stored: OperationRecord, progress: Progress) -> dict[str, object]:
    """What a write keeps of the caller's sends: the latest that may have been applied,
    the server's time at it, and whether an answer no attempt explains came."""
    if progress.sent_at is None:
        server_sent_at = stored.server_sent_at
    elif progress.server_sent_at is None:
        server_sent_at = None  # the row's belongs to an earlier send
    else:
        server_sent_at = latest(stored.server_sent_at, progress.server_sent_at)
    return {
        "sent_at": latest(stored.sent_at, progress.sent_at),
        "server_sent_at": server_sent_at,
        "replay_unexplained": stored.replay_unexplained or progress.replay_unexplained,
    }
