"""A client process that SIGKILLs itself at one point of one operation's life.

    python crash_client.py PLAN_JSON

The plan names the server, the store, the token, the operations (all run at once, in
threads) and which of them dies where:

- ``after-intent``: the intent is committed, the first attempt is about to be sent;
- ``during-send``: part of the request body is on the wire (``cut`` < 1), or all of
  it and the answer has not been read (``cut`` == 1);
- ``after-apply``: the server applied it and answered; the answer is not recorded;
- ``after-outcome``: the outcome is committed to the store.

The other operations are wherever they happen to be at that moment. Exit status 3
means the kill point was never reached, which the test counts as a failure.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(__file__))

from support import PATH, FastClock

from idemclient import Client, Outcome, RetryPolicy, State
from idemclient.hooks import AttemptEvent, Hooks


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CutStream(httpx.SyncByteStream):
    """Sends the first `cut` of the body, then dies while the request is being sent."""

    def __init__(self, body: bytes, cut: float) -> None:
        self.body = body
        # Part of it (at least one byte, never all), or, for a cut of 1, all of it.
        part = max(1, min(len(body) - 1, int(len(body) * cut)))
        self.size = len(body) if cut >= 1 else part

    def __iter__(self) -> Iterator[bytes]:
        yield self.body[: self.size]
        # Resumed only once those bytes were written to the socket: part of the
        # request (or all of it, with the answer not yet read) is out there.
        die()


class Sabotage(httpx.BaseTransport):
    """The real transport, with the kill points that need to see the wire."""

    def __init__(self, point: str, cut: float) -> None:
        self.inner = httpx.HTTPTransport()
        self.point = point
        self.cut = cut
        self.armed: str | None = None  # the key of the attempt to kill
        self.lock = threading.Lock()

    def arm(self, key: str) -> None:
        with self.lock:
            self.armed = key

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            mine = self.armed is not None and request.headers.get("idempotency-key") == self.armed
        if mine and self.point == "during-send":
            stream = request.stream
            assert isinstance(stream, httpx.SyncByteStream)
            body = b"".join(stream)
            request.stream = CutStream(body, self.cut)
        response = self.inner.handle_request(request)
        final = 200 <= response.status_code < 300 and response.status_code != 202
        if mine and self.point == "after-apply" and final:
            die()
        return response

    def close(self) -> None:
        self.inner.close()


def main(plan: dict[str, Any]) -> None:
    point = plan["point"]
    sabotage = Sabotage(point, plan["cut"])

    def on_attempt(event: AttemptEvent) -> None:
        if event.attempt != 1:
            return
        if point == "after-intent":
            die()
        sabotage.arm(event.key)

    def on_outcome(outcome: Outcome) -> None:
        if point == "after-outcome" and outcome.state is State.SUCCEEDED:
            die()

    doomed = Hooks(on_attempt=on_attempt, on_outcome=on_outcome)
    with Client(
        store=plan["store"],
        base_url=plan["url"],
        headers={"Authorization": f"Bearer {plan['token']}"},
        transport=sabotage,
        clock=FastClock(),
        policy=RetryPolicy(max_attempts=10, attempt_timeout=10.0),
    ) as client:

        def run(n: int, operation: dict[str, Any]) -> None:
            hooks = doomed if n == plan["doomed"] else None
            client.post(PATH, json=operation["body"], operation_id=operation["id"], hooks=hooks)

        with ThreadPoolExecutor(max_workers=len(plan["operations"])) as pool:
            futures = [pool.submit(run, n, op) for n, op in enumerate(plan["operations"])]
            for future in futures:
                future.exception(timeout=120)
    sys.exit(3)  # every operation ended and nothing killed us


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
