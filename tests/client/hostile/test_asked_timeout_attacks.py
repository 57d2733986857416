"""Attacks on the caller's timeouts kept beside those cut for each attempt (a request
sent again starts from what its caller asked): a redirect, a request hook that sets the
timeouts of the send it sees, `httpx.Timeout(None)` with a pool timeout.

Through `wrap()`, against a scripted transport that notes what each attempt was sent with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import Indeterminate, ManualClock, NotSent, RetryPolicy, wrap

from .test_engine_split_attacks import PAYMENT, Noted

ALL = ("connect", "read", "write", "pool")


def _wrapped(tmp_path: Path, psp: Noted, clock: ManualClock, **options: object) -> httpx.Client:
    return wrap(
        httpx.Client(transport=httpx.MockTransport(psp), base_url="https://psp.test", **options),  # type: ignore[arg-type]
        store=tmp_path / "s.db",
        clock=clock,
        policy=RetryPolicy(deadline=9.5, attempt_timeout=20.0, max_attempts=10),
    )


def _following(
    tmp_path: Path, psp: Callable[[httpx.Request], httpx.Response], clock: ManualClock
) -> httpx.Client:
    """A wrapped client that follows redirects, with 9.5 s of deadline and 20 s attempts."""
    return wrap(
        httpx.Client(
            transport=httpx.MockTransport(psp), base_url="https://psp.test", follow_redirects=True
        ),
        store=tmp_path / "s.db",
        clock=clock,
        policy=RetryPolicy(deadline=9.5, attempt_timeout=20.0, max_attempts=10),
    )


def test_a_request_hook_setting_the_timeouts_in_place_is_heard_on_a_second_send(
    tmp_path: Path,
) -> None:
    # A request event hook sets this send's read timeout in place (the request it sees
    # carries the dict of timeouts): on the first send it is heard; on the same request
    # sent again after NotSent, it must be heard too, not replaced by the first send's.
    clock = ManualClock()
    psp = Noted(503, 503, 503)
    reads = iter([4.0, 2.0])

    def hook(request: httpx.Request) -> None:
        request.extensions["timeout"]["read"] = next(reads)

    http = _wrapped(tmp_path, psp, clock, event_hooks={"request": [hook]})
    request = http.build_request("POST", "/v1/payments", json=PAYMENT, timeout=5.0)
    with pytest.raises(NotSent):
        http.send(request)
    assert psp.timeouts[0]["read"] == 4.0  # heard on the first send
    clock.advance(60)
    assert http.send(request).status_code == 201
    assert psp.timeouts[-1]["read"] == 2.0
    http.close()


def test_a_pool_timeout_alone_is_kept_on_a_second_send(tmp_path: Path) -> None:
    clock = ManualClock()
    psp = Noted(503, 503, 503)
    http = _wrapped(tmp_path, psp, clock)
    request = http.build_request(
        "POST", "/v1/payments", json=PAYMENT, timeout=httpx.Timeout(None, pool=0.25)
    )
    with pytest.raises(NotSent):
        http.send(request)
    clock.advance(60)
    assert http.send(request).status_code == 201
    assert psp.timeouts[-1] == {"connect": 9.5, "read": 9.5, "write": 9.5, "pool": 0.25}
    http.close()


def test_a_redirected_request_sent_again_starts_from_the_timeouts_asked(tmp_path: Path) -> None:
    # 307 to another path (the body and method kept), then 503s to its end; sent
    # again, the redirect's attempts start from the caller's timeouts too.
    clock = ManualClock()
    script = iter([307, 503, 503, 503, 307, 201])
    timeouts: list[dict[str, float | None]] = []

    def psp(request: httpx.Request) -> httpx.Response:
        timeouts.append(dict(request.extensions["timeout"]))
        code = next(script)
        if code == 307:
            return httpx.Response(307, headers={"Location": "/v2/payments"})
        if code == 503:
            return httpx.Response(503, headers={"Retry-After": "4"})
        return httpx.Response(201, json={"id": "pay_1", "status": "succeeded"})

    http = _following(tmp_path, psp, clock)
    request = http.build_request("POST", "/v1/payments", json=PAYMENT, timeout=5.0)
    with pytest.raises((NotSent, Indeterminate)):  # the redirect's 503s: maybe applied
        http.send(request)
    assert timeouts[-1]["read"] == pytest.approx(1.5)  # what the first call had left
    clock.advance(60)
    assert http.send(request).status_code == 201
    assert timeouts[-2] == dict.fromkeys(ALL, 5.0)
    assert timeouts[-1] == dict.fromkeys(ALL, 5.0)
    http.close()


@pytest.mark.parametrize("status", [303, 302])
def test_the_get_after_a_see_other_keeps_the_tighter_timeouts_asked(
    tmp_path: Path, status: int
) -> None:
    # The caller asked for a 0.5 s connect timeout and 5 s for the rest; the attempt
    # timeout is 20 s and the deadline 9.5 s. The GET that follows the redirect is
    # bounded by what is left of the deadline, and never looser than what was asked.
    clock = ManualClock()
    timeouts: list[dict[str, float | None]] = []

    def psp(request: httpx.Request) -> httpx.Response:
        timeouts.append(dict(request.extensions["timeout"]))
        if request.method == "POST":
            clock.advance(7.0)  # the answer took 7 s: 2.5 s of the deadline left
            return httpx.Response(status, headers={"Location": "/v1/payments/pay_1"})
        return httpx.Response(200, json={"id": "pay_1", "status": "succeeded"})

    http = _following(tmp_path, psp, clock)
    asked = httpx.Timeout(5.0, connect=0.5)
    request = http.build_request("POST", "/v1/payments", json=PAYMENT, timeout=asked)
    assert http.send(request).status_code == 200  # a wrapped client follows as httpx does
    assert timeouts[0] == {"connect": 0.5, "read": 5.0, "write": 5.0, "pool": 5.0}
    assert timeouts[1] == {"connect": 0.5, "read": 2.5, "write": 2.5, "pool": 2.5}
    http.close()
