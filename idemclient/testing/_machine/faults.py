"""Fault scripts: what the sandbox does to the next N requests that match.

A fault is an action plus a match (path and/or idempotency key; None matches
anything) and a count. Each matching request uses up one count of the oldest matching
fault, so scripts play out in the order they were written. The actions:

- `Answer`: reply with a given status (and `Retry-After` in any form) instead of
  processing the request: a gateway or rate limiter in front of the server. Nothing
  is stored, so a 429 or 503 can never become the final answer for a key.
- `Delay`: process the request normally, then hold the response for a while: longer
  than the client's read timeout, the client sees a timeout for a request that was
  applied.
- `Crash`: stop after the given phase has committed and break the connection, leaving
  the row started with its lease held, as a dead worker would. A request that never
  reaches that phase (a replay, a 409) is answered normally. `Crash(FINISHED)` is
  apply-then-drop: the request is handled in full (committed, response stored), then
  the connection is broken instead of answering; it applies to any request.

`Gate` is not scripted by path: it holds one external call until a test releases it,
which is how a test keeps a request in flight while another one arrives.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import datetime

from .._protocol.rules import Phase

__all__ = ["Action", "Answer", "Crash", "Delay", "FaultPlan", "Gate"]

# RFC 9110: a field name is a token; a field value is visible ASCII, spaces, tabs and
# obs-text (bytes 0x80-0xFF, which is what Latin-1 can carry). A CR or LF would end the
# header and start another one (or the body) under the script's control, and a NUL or
# another control character is refused by the HTTP server, which then answers 500.
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _check_field(name: str, value: str) -> None:
    if _FIELD_NAME.fullmatch(name) is None:
        raise ValueError(f"{name!r} is not an HTTP header name")
    if _FIELD_VALUE.fullmatch(value) is None:
        bad = next(c for c in value if _FIELD_VALUE.fullmatch(c) is None)
        raise ValueError(
            f"the {name} header's value {value[:40]!r} holds {bad!r}, which no HTTP"
            " answer can carry (CR, LF and other control characters, or a character"
            " beyond Latin-1)"
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """Reply with `status` without processing the request."""

    status: int
    #: delta-seconds (number), an HTTP-date (aware datetime), or a raw string
    retry_after: float | str | datetime | None = None
    #: render `Retry-After` as an HTTP-date this many seconds after the server's now
    retry_after_date_in: float | None = None
    #: send `retry-after-ms` with this many milliseconds
    retry_after_ms: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    #: the body to send; None means a problem+json body naming the status
    body: bytes | None = None

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 599:
            raise ValueError(f"an HTTP status is 100..599, not {self.status!r}")
        # Garbage is allowed (a client must survive it), but only what a header can hold.
        if isinstance(self.retry_after, str):
            _check_field("Retry-After", self.retry_after)
        for name, value in self.headers:
            _check_field(name, value)


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the response `seconds` after the request was processed."""

    seconds: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.seconds < float("inf"):
            raise ValueError(f"a delay is a finite number of seconds >= 0, not {self.seconds!r}")


@dataclass(frozen=True, slots=True)
class Crash:
    """Die right after `after` committed: no response, lease left held."""

    after: Phase


Action = Answer | Delay | Crash


@dataclass(slots=True)
class _Scripted:
    action: Action
    path: str | None
    key: str | None
    remaining: int

    def matches(self, *, path: str, key: str | None, phased: bool) -> bool:
        # A crash needs phases to crash between; only resource-creating POSTs have them.
        # A drop (a crash after everything) can cut any answer, a look-up's or a replay's.
        crash = isinstance(self.action, Crash) and self.action.after is not Phase.FINISHED
        if crash and not phased:
            return False
        if self.path is not None and self.path != path:
            return False
        return self.key is None or self.key == key


class FaultPlan:
    """The scripted faults, oldest first. Thread-safe."""

    __slots__ = ("_faults", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[_Scripted] = []

    def add(
        self, action: Action, *, times: int = 1, path: str | None = None, key: str | None = None
    ) -> None:
        if times < 1:
            raise ValueError(f"times must be at least 1, not {times!r}")
        with self._lock:
            self._faults.append(_Scripted(action, path, key, times))

    def take(self, *, path: str, key: str | None, phased: bool) -> Action | None:
        """Use up one count of the oldest fault matching this request, if any."""
        with self._lock:
            for index, fault in enumerate(self._faults):
                if fault.matches(path=path, key=key, phased=phased):
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        del self._faults[index]
                    return fault.action
        return None

    def pending(self) -> int:
        """How many requests the remaining faults will still affect."""
        with self._lock:
            return sum(fault.remaining for fault in self._faults)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()


@dataclass(eq=False, slots=True)
class Gate:
    """Holds one external call until released.

    `timeout` bounds the hold, so a test that forgets to release cannot hang the
    server: after it, the call goes ahead as if released.
    """

    timeout: float = 30.0
    _reached: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _released: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    @property
    def reached(self) -> bool:
        """A call is (or was) held here."""
        return self._reached.is_set()

    def wait_until_reached(self, timeout: float = 10.0) -> bool:
        """Block until a call arrives at the gate (True), or `timeout` passes (False)."""
        return self._reached.wait(timeout)

    def release(self) -> None:
        """Let the held call (or the next one to arrive) go ahead."""
        self._released.set()

    def pass_through(self) -> None:
        """Called by the server: announce arrival, then wait for the release."""
        self._reached.set()
        self._released.wait(self.timeout)
