"""Helpers shared by the reliability tests and the child processes they start.

Child processes import this file by path (their directory is put on sys.path), so it
imports nothing from the test package itself.
"""

from __future__ import annotations

import os
import random
import selectors
import subprocess
import time
from typing import Any

import httpx

from idemclient.clock import SystemClock
from idemclient.testing import LedgerEntry, ReferenceServer

PATH = "/v1/payments"


class FastClock(SystemClock):
    """Real time, except that sleeping moves the clock forward instead of waiting.

    A client on it honours every Retry-After and backoff exactly as it would on the
    system clock (its deadline, the not-before times it records, a lease it outlives),
    but the time it would have spent asleep passes at once.
    """

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def exactly_once(entry: LedgerEntry) -> bool:
    """One instruction applied at each external system, each handler run once."""
    return (
        (entry.ext1_applied, entry.ext2_applied) == (1, 1)
        and entry.journal == ("H1", "H2", "H3")
        and entry.key_state == "finished"
        and entry.status == "succeeded"
    )


def payment(reference: str, rng: random.Random | None = None) -> dict[str, Any]:
    amount = 100 if rng is None else rng.randrange(1, 10_000_000)
    return {"amount": amount, "currency": "EUR", "reference": reference}


class Counting(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """A reference server's in-process transport, counting the requests that reach it:
    the operations' (`requests`), and apart, the clients' questions for the server's
    time (`probes`, HEAD), which change nothing."""

    def __init__(self, server: ReferenceServer) -> None:
        self.inner = server.transport
        self.requests = 0
        self.probes = 0

    def _count(self, request: httpx.Request) -> None:
        if request.method == "HEAD":
            self.probes += 1
        else:
            self.requests += 1

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._count(request)
        return self.inner.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._count(request)
        return await self.inner.handle_async_request(request)


class ChildLines:
    """The lines a child process prints on stdout, each waited for with a bound.

    Reads the pipe's file descriptor directly (never through a buffered reader that a
    selector cannot see into); every wait is on the pipe itself, never on a timer.
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._fd = process.stdout.fileno()
        self._buffer = b""

    def next(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self._fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise AssertionError(f"no line from the child within {timeout} s")
                chunk = os.read(self._fd, 65536)
                if not chunk:
                    raise AssertionError("the child closed its output before the line came")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()
