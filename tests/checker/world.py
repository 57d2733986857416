"""The checker's world: one timeline, two clocks on it, process death, and the wire.

Everything here is deterministic. Time moves only when a rule moves it or when the
client sleeps (a sleep moves the whole world, server included). A process dies the way
a SIGKILL kills it: at a chosen event (a store write, or a request going out or coming
back), `Death` is raised, and from then on that process's store refuses everything, so
no `except` or `finally` records anything after the kill.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio.lowlevel
import httpx

from idemclient.store import SQLiteStore

#: The store's methods that write. A dead process makes none of them; a full disk
#: refuses the ones named in `DiskFull`.
WRITES = frozenset(
    {
        "begin",
        "claim",
        "record_attempt",
        "finish",
        "settle",
        "register",
        "record_settled",
        "reopen",
        "reap",
        "advance_clock",
        "clock_went_back",
        "move",
        "purge",
    }
)
#: Where the intent is committed, and where an outcome is.
INTENT_WRITES = frozenset({"begin", "claim", "register"})
OUTCOME_WRITES = frozenset({"finish", "settle", "record_settled"})


class Death(BaseException):
    """The process was SIGKILLed here. A BaseException: no `except Exception` sees it."""


class World:
    """True time, as the server's clock and the client's clock read it, each with an
    offset that a rule can move forward or back."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.true = start
        self.mono = 0.0
        self.sleeps = 0

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self.true += seconds
            self.mono += seconds


class Clock:
    """A clock of the world: `offset` seconds away from true time. Sleeping moves the
    world; `advance` (the server's maintenance API) moves it too."""

    def __init__(self, world: World, offset: float = 0.0) -> None:
        self.world = world
        self.offset = offset

    def time(self) -> float:
        return self.world.true + self.offset

    def monotonic(self) -> float:
        return self.world.mono

    def advance(self, seconds: float) -> float:
        self.world.advance(seconds)
        return self.time()

    def sleep(self, seconds: float) -> None:
        self.world.sleeps += 1
        self.world.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await anyio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"Clock(offset={self.offset})"


@dataclass
class Fate:
    """When one process dies: at its `kill_at`-th event (None: it lives), and which
    store writes a full disk refuses."""

    kill_at: int | None = None
    disk_full: frozenset[str] = frozenset()
    #: the event at which the process stops (SIGSTOP) until `go_on` is set
    pause_at: int | None = None
    events: list[str] = field(default_factory=list)
    dead: bool = False
    #: an invariant found broken inside the process (see `Wire`): raised once it ends
    violation: AssertionError | None = None
    paused: threading.Event = field(default_factory=threading.Event)
    go_on: threading.Event = field(default_factory=threading.Event)

    def event(self, name: str) -> None:
        if self.dead:
            raise Death(f"dead before {name}")
        self.events.append(name)
        if self.kill_at is not None and len(self.events) > self.kill_at:
            self.dead = True
            raise Death(f"killed at {name} (event {self.kill_at})")
        if self.pause_at is not None and len(self.events) == self.pause_at + 1:
            self.paused.set()
            if not self.go_on.wait(timeout=60):
                raise AssertionError(f"paused at {name} and never let go on")


class MortalStore:
    """A real SQLite store as one process sees it: every write is an event of its
    `Fate` (before and after), a dead process's store refuses every call, and a full
    disk refuses the writes it names as SQLite would ("database or disk is full")."""

    def __init__(self, path: str, fate: Fate) -> None:
        self._inner = SQLiteStore(path)
        self._fate = fate

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._inner, name)
        if not callable(inner):
            return inner
        fate = self._fate

        def call(*args: Any, **kwargs: Any) -> Any:
            if fate.dead and name != "close":
                raise Death(f"dead before {name}")
            if name not in WRITES:
                return inner(*args, **kwargs)
            fate.event(f"before {name}")
            if name in fate.disk_full:
                raise self._inner._translate(sqlite3.OperationalError("database or disk is full"))
            result = inner(*args, **kwargs)
            fate.event(f"after {name}")
            return result

        return call

    def close(self) -> None:
        self._inner.close()


class RefreshingAuth(httpx.Auth):
    """A bearer token that is refreshed on a 401 and the request sent again (the same
    tenant: the reference server names the client by its token)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.refreshes = 0

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            self.refreshes += 1
            request.headers["Authorization"] = f"Bearer {self.token}"
            yield request


class _SlowBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        raise httpx.ReadTimeout("the body stopped coming")
        yield b""  # pragma: no cover

    async def __aiter__(self) -> Any:
        raise httpx.ReadTimeout("the body stopped coming")
        yield b""  # pragma: no cover


class Wire(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The network between one client process and the in-process server: a request
    going out and its answer coming back are events of the process's `Fate`, and the
    next `slow_bodies` answers (after the server has acted) never finish their body."""

    def __init__(
        self,
        inner: Any,
        fate: Fate,
        slow_bodies: list[int],
        before: Callable[[httpx.Request], httpx.Response | None] | None = None,
        after: Callable[[httpx.Request, httpx.Response], httpx.Response] | None = None,
    ) -> None:
        self._inner = inner
        self._fate = fate
        #: the process's fate (a paused one's calls take its pause)
        self.fate = fate
        self._slow = slow_bodies  # shared with the machine: one count, used up here
        #: called with each request before it reaches the server: an answer it gives
        #: is the server's instead (the machine's faults that depend on what the server
        #: holds for the request's key)
        self._before = before
        #: called with each request the server answered and its answer, before the
        #: answer starts back: what it returns goes back instead, and what it raises is
        #: raised (something between the server and the client: a gateway's 5xx, a
        #: read timeout, a connection reset, after the server has acted)
        self._after = after
        self.sent = 0
        #: the operations' requests (POSTs) among them
        self.posted = 0

    def _out(self, request: httpx.Request) -> httpx.Response | None:
        if request.method == "HEAD":
            # A client's question for the server's time (its Date): it changes nothing
            # anywhere, and a death while it is out is a death before the operation's
            # first write, which a kill at event 0 is. Not an event, so that the kill
            # points of a history mean the same with or without one.
            return None
        self._fate.event(f"send {request.method} {request.url.path}")
        self.sent += 1
        self.posted += request.method == "POST"
        if self._before is None:
            return None
        try:
            return self._before(request)
        except AssertionError as violation:
            # A claim found false as this request reaches the server: the process stops
            # here, as if killed (so nothing of the failure reaches its store), and the
            # machine raises the failure (`Fate.violation`).
            self._fate.dead = True
            self._fate.violation = violation
            raise Death(f"stopped: {violation}") from violation

    def _back(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if request.method == "HEAD":
            return response
        self._fate.event(f"answer {response.status_code} {request.method} {request.url.path}")
        if self._slow and self._slow[0] > 0 and request.method == "POST":
            self._slow[0] -= 1
            return httpx.Response(
                response.status_code,
                headers=response.headers,
                stream=_SlowBody(),
                request=request,
            )
        return response

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._out(request)
        if response is None:
            response = self._inner.handle_request(request)
            response.read()
            response = self._between(request, response)
        return self._back(request, response)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = self._out(request)
        if response is None:
            response = await self._inner.handle_async_request(request)
            await response.aread()
            response = self._between(request, response)
        return self._back(request, response)

    def _between(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        if self._after is None or request.method == "HEAD":
            return response
        return self._after(request, response)


def store_bytes(path: str) -> bytes:
    """Every byte of a SQLite store on disk: the file, its WAL and shared memory."""
    out = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            with open(path + suffix, "rb") as handle:
                out += handle.read()
        except FileNotFoundError:
            pass
    return out
