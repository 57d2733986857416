"""Attacks on the engine split into rooms of one job: what one call learns must stay
that call's, and what the caller asked for must be what every call of it starts from.

Through `wrap()` and `Client`, against a scripted transport that notes what each
attempt was sent with.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock, NotSent, RetryPolicy, wrap

PAYMENT = {"amount": 700, "currency": "EUR"}


class Noted:
    """A PSP that answers a script of statuses (503s with a Retry-After, then 201s)
    and notes each attempt's timeouts and key."""

    def __init__(self, *statuses: int, retry_after: str = "4") -> None:
        self.statuses = list(statuses)
        self.retry_after = retry_after
        self.timeouts: list[dict[str, float | None]] = []
        self.keys: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.timeouts.append(dict(request.extensions["timeout"]))
        self.keys.append(request.headers.get("idempotency-key"))
        code = self.statuses.pop(0) if self.statuses else 201
        if code == 503:
            return httpx.Response(503, headers={"Retry-After": self.retry_after})
        return httpx.Response(code, json={"id": "pay_1", "status": "succeeded"})


@pytest.mark.parametrize("asked", [httpx.Timeout(5.0), httpx.Timeout(None)])
def test_a_request_sent_again_starts_from_the_timeouts_its_caller_asked_for(
    tmp_path: Path, asked: httpx.Timeout
) -> None:
    # The first call runs out of time after three 503s (the last attempt with 1.5 s
    # left) and says NotSent: safe to send again with the same key. The caller sends
    # the same request again a minute later: its first attempt has the whole deadline
    # before it, and must get the timeouts asked for (cut to the attempt timeout),
    # not the 1.5 s the first call had left, which a slow PSP would turn into a
    # timeout on every attempt of every later send.
    clock = ManualClock()
    psp = Noted(503, 503, 503)
    http = wrap(
        httpx.Client(transport=httpx.MockTransport(psp), base_url="https://psp.test"),
        store=tmp_path / "s.db",
        clock=clock,
        policy=RetryPolicy(deadline=9.5, attempt_timeout=20.0, max_attempts=10),
    )
    request = http.build_request("POST", "/v1/payments", json=PAYMENT, timeout=asked)
    with pytest.raises(NotSent):
        http.send(request)
    assert psp.timeouts[-1]["read"] == pytest.approx(1.5)  # what the first call had left
    clock.advance(60)
    assert http.send(request).status_code == 201
    expected = 9.5 if asked.read is None else 5.0  # the deadline left, or asked
    assert psp.timeouts[-1] == dict.fromkeys(("connect", "read", "write", "pool"), expected)
    assert len(set(psp.keys)) == 1  # one operation throughout
    http.close()
