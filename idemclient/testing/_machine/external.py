"""Two simulated external systems (a card network, a payment rail), each honouring its keys.

Each one applies an instruction at most once per idempotency key: a second call with
the same derived key applies nothing and answers with what the first one recorded. Each
answers status queries by key, so a resumer can probe before calling again.

Faults are scripted per system and consumed per interaction (a call or a status probe,
alike), oldest first:

- `timeout`: the instruction is lost on the way; nothing is applied, no answer.
- `down`: the connection is refused; nothing is sent, nothing applied.
- `apply_then_timeout`: the instruction is applied, then the answer is lost.
- `decline`: the next new instruction is applied as a decline (a definite "no").
  Only calls that apply a new key use it up; probes and replays leave it queued.

So `timeout` for 2 interactions means: the call times out and the inline probe times
out too, and the server must answer 202 with the outcome unknown.
"""

from __future__ import annotations

import enum
import threading
from collections import deque
from dataclasses import dataclass

from .._storage.backend import StorageBackend
from .._storage.rows import ExternalRecord
from .clock import ServerClock
from .faults import Gate

__all__ = ["ExternalDown", "ExternalMode", "ExternalSystem", "ExternalTimeout"]


class ExternalMode(enum.StrEnum):
    """How an external system misbehaves."""

    TIMEOUT = "timeout"
    DOWN = "down"
    APPLY_THEN_TIMEOUT = "apply_then_timeout"
    DECLINE = "decline"


class ExternalTimeout(Exception):
    """No answer in time: the instruction may or may not have been applied."""


class ExternalDown(Exception):
    """The connection was refused: nothing was sent."""


@dataclass(slots=True)
class _Failure:
    mode: ExternalMode
    remaining: int


class ExternalSystem:
    """One simulated external system. Thread-safe."""

    def __init__(
        self,
        number: int,
        storage: StorageBackend,
        clock: ServerClock,
        *,
        retention: float | None = None,
    ) -> None:
        if retention is not None and not retention > 0:
            raise ValueError(f"an external retention must be positive, not {retention!r}")
        self.number = number
        self._storage = storage
        self._clock = clock
        #: how long this system honours a key (None: for ever); past it, an instruction
        #: under the same key is a new one, and applies again
        self.retention = retention
        self._lock = threading.Lock()
        self._failures: deque[_Failure] = deque()
        self._declines = 0
        self._gates: deque[Gate] = deque()

    def inject(self, mode: ExternalMode | str, *, times: int = 1) -> None:
        """Script `mode` for the next `times` interactions (calls that apply, for decline)."""
        mode = ExternalMode(mode)
        if times < 1:
            raise ValueError(f"times must be at least 1, not {times!r}")
        with self._lock:
            if mode is ExternalMode.DECLINE:
                self._declines += times
            else:
                self._failures.append(_Failure(mode, times))

    def hold(self, *, timeout: float = 30.0) -> Gate:
        """Hold the next call (before it applies anything) until the gate is released."""
        gate = Gate(timeout=timeout)
        with self._lock:
            self._gates.append(gate)
        return gate

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._declines = 0
            gates, self._gates = list(self._gates), deque()
        for gate in gates:
            gate.release()

    def _take_failure(self) -> ExternalMode | None:
        with self._lock:
            if not self._failures:
                return None
            head = self._failures[0]
            head.remaining -= 1
            if head.remaining == 0:
                self._failures.popleft()
            return head.mode

    def _take_decline(self) -> bool:
        with self._lock:
            if self._declines == 0:
                return False
            self._declines -= 1
            return True

    def _take_gate(self) -> Gate | None:
        with self._lock:
            return self._gates.popleft() if self._gates else None

    def call(self, key: str, *, resource_id: str, amount: int) -> ExternalRecord:
        """Deliver an instruction under `key`. Raises `ExternalTimeout` or `ExternalDown`."""
        failure = self._take_failure()
        if failure is ExternalMode.DOWN:
            raise ExternalDown(f"external system {self.number} refused the connection")
        if failure is ExternalMode.TIMEOUT:
            raise ExternalTimeout(f"external system {self.number} did not answer")
        gate = self._take_gate()
        if gate is not None:
            gate.pass_through()
        self._forget_expired(key)
        # Only a new instruction can be declined; look the key up only when a decline
        # is actually queued, so the common path stays one statement.
        declined = (
            self._declines > 0
            and self._storage.external_lookup(system=self.number, key=key) is None
            and self._take_decline()
        )
        record, _ = self._storage.external_apply(
            system=self.number,
            key=key,
            resource_id=resource_id,
            outcome="declined" if declined else "approved",
            reference=f"ext{self.number}_{key[:24]}",
            amount=amount,
            now=self._clock.time(),
        )
        if failure is ExternalMode.APPLY_THEN_TIMEOUT:
            raise ExternalTimeout(f"external system {self.number} applied, then went silent")
        return record

    def status(self, key: str) -> ExternalRecord | None:
        """What the system holds under `key` (None: never received). May raise like `call`."""
        failure = self._take_failure()
        if failure is ExternalMode.DOWN:
            raise ExternalDown(f"external system {self.number} refused the connection")
        if failure is not None:
            raise ExternalTimeout(f"external system {self.number} did not answer the probe")
        self._forget_expired(key)
        return self._storage.external_lookup(system=self.number, key=key)

    def _forget_expired(self, key: str) -> None:
        if self.retention is not None:
            before = self._clock.time() - self.retention
            self._storage.external_forget(system=self.number, key=key, applied_before=before)
