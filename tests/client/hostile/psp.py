"""A PSP for the hostile-flow tests: it deduplicates on the key (a finished key replays
its answer), counts effects per key, and follows a script of steps."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable

import httpx

Step = Callable[["PSP", httpx.Request], "httpx.Response | None"]

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


class PSP:
    """Deduplicates on the key (a finished key replays its answer); counts effects.

    `script` is a list of callables (psp, request) -> Response | None; each request
    pops one: it may raise, return a response, or return None for the normal behaviour.
    """

    def __init__(self, *script: Step) -> None:
        self.script = list(script)
        self.effects: Counter[str] = Counter()
        self.answers: dict[str, bytes] = {}
        self.seen: list[tuple[str, str, str | None, dict[str, str]]] = []
        self.lock = threading.Lock()

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)  # a client's time probe: no Date here, nothing done
        request.read()
        with self.lock:
            self.seen.append(
                (
                    request.method,
                    str(request.url),
                    request.headers.get("idempotency-key"),
                    dict(request.headers),
                )
            )
            step = self.script.pop(0) if self.script else None
        if step is not None:
            answer = step(self, request)
            if answer is not None:
                return answer
        if request.method == "GET":
            return httpx.Response(200, json={"id": request.url.path.rsplit("/", 1)[-1]})
        return self.pay(request)

    async def ahandler(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return self.handler(request)

    def apply(self, request: httpx.Request) -> bytes:
        key = request.headers.get("idempotency-key") or f"nokey-{len(self.seen)}"
        with self.lock:
            if key not in self.answers:
                self.effects[key] += 1
                body = {
                    "id": f"pay_{len(self.answers) + 1}",
                    **json.loads(request.content or b"{}"),
                }
                self.answers[key] = json.dumps(body).encode()
            return self.answers[key]

    def pay(self, request: httpx.Request) -> httpx.Response:
        key = request.headers.get("idempotency-key")
        replayed = key in self.answers
        body = self.apply(request)
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return httpx.Response(201, headers=headers, content=body)

    @property
    def total(self) -> int:
        return sum(self.effects.values())


def applied_then(error: type[Exception]) -> Step:
    """The server applies the request, and the answer is lost."""

    def step(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        psp.apply(request)
        raise error("scripted: applied, answer lost", request=request)  # type: ignore[call-arg]

    return step


def fails(error: type[Exception]) -> Step:
    """Nothing applied; the attempt fails with `error`."""

    def step(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        raise error("scripted", request=request)  # type: ignore[call-arg]

    return step


def answer(status: int, **headers: str) -> Step:
    def step(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(status, headers=headers, json={"status": status})

    return step
