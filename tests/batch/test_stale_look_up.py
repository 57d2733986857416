"""A batch asks every row's look-up first and records what they found afterwards: a
row's "not found" is as old as its question, not as the moment it is recorded. Judged
by the later moment, an answer given while the server could still be running the
row's last send is believed "never applied", and the row is sent again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    ManualClock,
    RetryPolicy,
    key_from_identity,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch import asubmit, submit
from idemclient.testing import ReferenceServer

from .test_submit import make_batch

NAME = "django-idempotency-key"  # does not guard a key in flight; keeps keys 300 s
WINDOW = profiles.BUILTIN[NAME].in_flight_for + CLOCK_SKEW


class SlowLookUp:
    """The server behind a transport where one row's first look-up is answered 503
    with a Retry-After (the asking phase takes that long), and where the server
    finishes what it admitted (its recovery) just as that look-up comes in."""

    def __init__(self, server: ReferenceServer, reference: str, retry_after: float) -> None:
        self.server, self.reference, self.retry_after = server, reference, retry_after
        self.slowed = False
        self.posts = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts += 1
        if request.method == "GET" and self.reference in str(request.url) and not self.slowed:
            self.slowed = True
            self.server.recover()  # within the window: the send it was running ends
            return httpx.Response(503, headers={"Retry-After": f"{self.retry_after:.0f}"})
        return self.server.transport.handle_request(request)


def _client(transport: httpx.BaseTransport, clock: ManualClock, store: Path) -> Client:
    return Client(
        store=store,
        clock=clock,
        profile=NAME,
        policy=RetryPolicy(max_attempts=1),
        transport=transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    )


def test_a_not_found_asked_within_the_window_is_not_believed_when_recorded_after_it(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=NAME) as server:
        slow = SlowLookUp(server, "E0001", retry_after=20.0)
        transport = httpx.MockTransport(slow.handler)
        # Row E0000 is admitted by the server, which has not run it yet (a crash).
        server.crash("ADMITTED", key=key_from_identity("E0000", "payout"))
        with _client(transport, clock, tmp_path / "s.db") as client:
            assert [r.state for r in submit(make_batch(1), client).rows] == ["indeterminate"]
        # Ten seconds before the window ends, the file is run again with a new row.
        # E0000 is asked first: nothing yet. E0001's look-up takes 20 s more (a 503),
        # and meanwhile the server finishes E0000's first send.
        clock.advance(WINDOW - 10.0)
        with _client(transport, clock, tmp_path / "s.db") as client:
            report = submit(make_batch(2), client, concurrency=1)
        assert slow.slowed
        paid = [e for e in server.ledger() if e.reference == "E0000"]
    assert len(paid) == 1, f"E0000 paid {len(paid)} times; report: {report.rows[0]}"
    assert report.rows[0].state == "indeterminate"
    assert report.rows[0].reason.startswith("not found on the server yet")


@pytest.mark.anyio
async def test_the_async_batch_judges_a_not_found_as_of_its_question_too(tmp_path: Path) -> None:
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=NAME) as server:
        slow = SlowLookUp(server, "E0001", retry_after=20.0)
        server.crash("ADMITTED", key=key_from_identity("E0000", "payout"))
        with _client(httpx.MockTransport(slow.handler), clock, tmp_path / "s.db") as client:
            assert [r.state for r in submit(make_batch(1), client).rows] == ["indeterminate"]
        clock.advance(WINDOW - 10.0)

        async def handler(request: httpx.Request) -> httpx.Response:
            return slow.handler(request)

        async with AsyncClient(
            store=tmp_path / "s.db",
            clock=clock,
            profile=NAME,
            policy=RetryPolicy(max_attempts=1),
            transport=httpx.MockTransport(handler),
            base_url="http://psp.test",
            headers={"Authorization": "Bearer payroll-ops"},
        ) as client:
            report = await asubmit(make_batch(2), client, concurrency=1)
        assert slow.slowed
        paid = [e for e in server.ledger() if e.reference == "E0000"]
    assert len(paid) == 1, f"E0000 paid {len(paid)} times; report: {report.rows[0]}"
    assert report.rows[0].state == "indeterminate"
