"""What the batch asks of a `MemoryStore` beyond sending: registration (all or nothing),
a row found on the server recorded settled, a corrected row reopened, the references
held, the look-ups' "none" kept, the bodies' digests, and the requests a run finds
again by their references.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._errors import OperationMismatch
from .._outcome import State
from ._base import (
    Intent,
    NotFound,
    OperationRecord,
    StoredResponse,
)
from ._guards import may_reopen
from ._memory_rows import MemoryRows
from ._rows import mismatch
from ._sql_batch import refused

__all__ = ["MemoryBatch"]


class MemoryBatch(MemoryRows):
    """What the batch writes and reads beyond sending: see the module docstring."""

    def register(self, intents: Iterable[Intent], *, now: float) -> int:
        with self._open():
            made: list[OperationRecord] = []
            conflicts: list[tuple[str, str, str]] = []
            for intent in intents:
                found = self._found_for(intent)
                if found is None:
                    made.append(self._new(intent, State.PENDING, now, None, None))
                    continue
                reason = mismatch(intent, found, sending=False)
                if reason is not None:
                    conflicts.append((intent.operation_id, intent.key, reason))
            if conflicts:  # all or nothing: what this call made goes
                for record in made:
                    del self._rows[record.operation_id]
                    del self._by_key[record.key]
                raise refused(conflicts)
            return len(made)

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
        answer = self._kept(response or StoredResponse.of(200, (), b""))
        with self._open():
            found = self._found_for(intent)
            if found is None:
                made = self._new(intent, state, now, None, None)
                return self._put(made, evidence=evidence, response=answer, finished_at=now)
            reason = mismatch(intent, found, sending=False)
            if reason is not None:
                raise OperationMismatch(reason, operation_id=intent.operation_id, key=found.key)
            return found

    def reopen(self, intent: Intent, *, evidence: str, now: float) -> OperationRecord | None:
        with self._open():
            row = self._rows.get(intent.operation_id)
            if row is None or row.record.key != intent.key:
                return None
            stored = row.record
            if stored.maybe_applied or stored.lease_owner is not None or not may_reopen(stored):
                return None
            headers, withheld = self.header_rule.split_request(intent.headers)
            return self._put(
                stored,
                url=intent.url,
                headers=headers,
                withheld_headers=withheld,
                body=intent.body,
                fingerprint=intent.fingerprint,
                state=State.PENDING,
                evidence=evidence,
                not_before=None,
                response=None,
                updated_at=now,
                finished_at=None,
            )

    def references(
        self, *, after: tuple[str, str] | None = None, limit: int = 5_000
    ) -> Sequence[tuple[str, str]]:
        with self._open():
            pairs = sorted(
                (r.record.reference, r.record.operation_id)
                for r in self._rows.values()
                if r.record.reference is not None
            )
        return [pair for pair in pairs if after is None or pair > after][:limit]

    def remember_not_found(self, answers: Iterable[NotFound], *, now: float) -> None:
        kept = list(answers)
        if not kept:
            return
        with self._open():
            for answer in kept:
                self._not_found[answer.operation_id] = answer
            self._high_water = max(self._high_water, now)

    def not_found(self, operation_ids: Iterable[str]) -> Sequence[NotFound]:
        with self._open():
            return [self._not_found[i] for i in set(operation_ids) if i in self._not_found]

    def forget_not_found(self, *, asked_before: float) -> int:
        with self._open():
            old = [i for i, answer in self._not_found.items() if answer.asked_at < asked_before]
            for operation_id in old:
                del self._not_found[operation_id]
            return len(old)

    def note_contents(self, digests: Iterable[tuple[str, str]]) -> None:
        with self._open():
            self._contents.update(digests)

    def find_contents(self, digests: Iterable[str]) -> Sequence[tuple[str, str]]:
        wanted = set(digests)
        with self._open():
            return [
                (digest, operation_id)
                for operation_id, digest in self._contents.items()
                if digest in wanted and operation_id in self._rows
            ]

    def undigested(self, *, id_prefix: str, limit: int, after: str = "") -> Sequence[Intent]:
        with self._open():
            ids = sorted(
                i
                for i in self._rows
                if i > after and i.startswith(id_prefix) and i not in self._contents
            )
            return [_request(self._rows[i].record) for i in ids[:limit]]

    def find_requests(self, *, reference_tails: Iterable[str]) -> Sequence[Intent]:
        with self._open():
            held = [r.record for r in self._rows.values() if r.record.reference is not None]
            if not held:
                return []
            tails = set(reference_tails)
            return [_request(r) for r in held if _tail_in(r.reference or "", tails)]


def _tail_in(reference: str, tails: set[str]) -> bool:
    """Whether `reference`, or what follows any "/" in it, is one of `tails`."""
    if reference in tails:
        return True
    return any(reference[i + 1 :] in tails for i, c in enumerate(reference) if c == "/")


def _request(record: OperationRecord) -> Intent:
    """What `record` was recorded to send (as `find_requests` gives it)."""
    return Intent(
        operation_id=record.operation_id,
        key=record.key,
        key_given=True,
        method=record.method,
        url=record.url,
        headers=record.headers,
        body=record.body,
        fingerprint=record.fingerprint,
        reference=record.reference,
        profile=record.profile,
    )
