"""A minimal stateful stand-in for a PSP, for the client's own tests.

It deduplicates on the idempotency key exactly as a server should (a finished key
replays its stored answer) and counts effects per key, and it follows a script of
faults, one entry per request. The full reference server lives in idemclient.testing.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field

import httpx

from idemclient import ManualClock


@dataclass
class Fault:
    """What the next request meets. `apply` says whether the effect happens first."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error: type[httpx.TransportError] | None = None
    apply: bool = False


OK = Fault()


def status(code: int, **headers: str) -> Fault:
    return Fault(status=code, headers={k.replace("_", "-"): v for k, v in headers.items()})


def error(kind: type[httpx.TransportError], *, apply: bool = False) -> Fault:
    return Fault(error=kind, apply=apply)


class FakePSP:
    def __init__(self, *script: Fault) -> None:
        self.script = list(script)
        self.effects: Counter[str] = Counter()
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.requests: list[httpx.Request] = []
        #: each attempt's timeouts as sent (the request object itself is reused)
        self.timeouts: list[dict[str, float]] = []
        self.lock = threading.Lock()

    @property
    def keys(self) -> list[str | None]:
        return [r.headers.get("idempotency-key") for r in self.requests]

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)  # a client's time probe: no Date here, nothing done
        with self.lock:
            self.requests.append(request)
            self.timeouts.append(dict(request.extensions.get("timeout", {})))
            fault = self.script.pop(0) if self.script else OK
            key = request.headers.get("idempotency-key")
            if fault.apply and key is not None:
                self._apply(key, request)
            if fault.error is not None:
                raise fault.error(f"scripted {fault.error.__name__}", request=request)
            if fault.status is not None:
                return httpx.Response(
                    fault.status, headers=fault.headers, json={"status": fault.status}
                )
            if key is None:
                return httpx.Response(400, json={"error": "missing key"})
            replayed = key in self.answers
            code, body = self._apply(key, request)
            headers = {"Idempotent-Replayed": "true"} if replayed else {}
            return httpx.Response(code, headers=headers, content=body)

    async def async_handler(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return self.handler(request)

    def _apply(self, key: str, request: httpx.Request) -> tuple[int, bytes]:
        if key not in self.answers:
            self.effects[key] += 1
            payload = json.loads(request.read() or b"{}")
            body = json.dumps({"id": f"pay_{len(self.answers) + 1}", **payload}).encode()
            self.answers[key] = (201, body)
        return self.answers[key]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)

    def async_transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.async_handler)


class SetClock(ManualClock):
    """A `ManualClock` whose wall time an operator can set: `offset` seconds from the
    true time (monotonic time never moves with it)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        super().__init__(start)
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


def forgets(psp: FakePSP) -> None:
    """The server's key retention passes: it keeps its effects, forgets its keys."""
    psp.answers.clear()
