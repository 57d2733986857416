"""Attacks on the server's `Date` as a second clock (see `idemclient._server_time`):
the HEAD probe cut short, hanging, or reaching a method-blind payment view; many
operations resumed at once; a client that talks to many origins; a clock set back
before a long-running client started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    ReconcileRequired,
    RetryPolicy,
    State,
)
from idemclient._server_time import ASK_AGAIN_AFTER, MAX_ORIGINS
from idemclient._settings import origin_of
from idemclient.testing import ReferenceServer
from tests.integration.test_server_clock import BASE, HOUR, Shop, _bearer, _paid_then_timed_out


def _interrupted_probe(shop: Shop) -> None:
    def cut_on_head(request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        if request.method == "HEAD":
            raise KeyboardInterrupt  # the process is stopped while it asks the time
        return inner.handle_request(request)

    inner = shop.through(cut_on_head)
    with pytest.raises(KeyboardInterrupt):
        shop.pay("client")
    shop.wire.inner = inner


def test_a_probe_cut_short_gives_the_lease_back(tmp_path: Path) -> None:
    shop = Shop(tmp_path, "reference")
    try:
        _paid_then_timed_out(shop, "client")
        shop.world.advance(HOUR)
        _interrupted_probe(shop)
        # Nothing was sent by the interrupted process: the next one may send at once.
        shop.wire.sent.clear()
        outcome = shop.pay("client")
        assert shop.wire.sent[-1:] == ["POST"], (shop.wire.sent, outcome)
        assert shop.record().state is State.SUCCEEDED
        assert shop.applied() == 1
    finally:
        shop.close()


def test_many_operations_resumed_at_once_ask_the_time_once(tmp_path: Path) -> None:
    # A worker that restarts and resumes its backlog concurrently: every maybe-applied
    # operation finds no Date heard yet. Each sent its own HEAD (twenty before any
    # payment); one asks now, and the others wait for its answer.
    shop = Shop(tmp_path, "reference")
    references = [f"inv-{n}" for n in range(20)]
    try:
        shop.server.delay(120.0, times=len(references))
        for reference in references:
            assert isinstance(shop.pay("client", reference), Indeterminate)
        shop.world.advance(HOUR)
        shop.wire.sent.clear()

        async def resume() -> list[Any]:
            async with AsyncClient(
                base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()
            ) as client:
                return await asyncio.gather(
                    *(
                        client.post(shop.payments, json=shop.body(r), operation_id=r)
                        for r in references
                    )
                )

        asyncio.run(resume())
        assert shop.wire.sent.count("POST") == len(references)
        assert shop.wire.sent.count("HEAD") == 1, shop.wire.sent.count("HEAD")
    finally:
        shop.close()


def _head_hangs(shop: Shop) -> None:
    """The server (or a gateway before it) never answers a HEAD: each one runs until
    its read timeout, on the shared timeline."""

    def hang(request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        if request.method == "HEAD":
            shop.world.advance(request.extensions["timeout"]["read"])
            raise httpx.ReadTimeout("no answer to HEAD", request=request)
        return inner.handle_request(request)

    shop.through(hang)


def test_a_hanging_probe_leaves_the_operation_time_to_be_sent(tmp_path: Path) -> None:
    shop = Shop(tmp_path, "reference")
    try:
        _paid_then_timed_out(shop, "client")
        shop.world.advance(HOUR)
        _head_hangs(shop)
        # A deadline no longer than an attempt's timeout (each attempt is cut to it).
        options = {**shop.options(), "policy": RetryPolicy(max_attempts=1, deadline=20.0)}
        shop.options = lambda: options  # type: ignore[method-assign]
        shop.wire.sent.clear()
        outcome = shop.pay("client")
        assert shop.wire.sent == ["HEAD", "POST"], (shop.wire.sent, outcome)
        assert shop.record().state is State.SUCCEEDED, outcome
        assert shop.applied() == 1
    finally:
        shop.close()


def _one_attempt_against(
    handler: Callable[[httpx.Request], httpx.Response],
    base_url: str,
    tmp_path: Path,
    clock: ManualClock,
) -> dict[str, Any]:
    """A client's options: `handler` as the server at `base_url`, one attempt a call."""
    return {
        "base_url": base_url,
        "transport": httpx.MockTransport(handler),
        "store": tmp_path / "s.db",
        "clock": clock,
        "policy": RetryPolicy(max_attempts=1),
        "time_probe": True,
    }


def test_an_origin_that_answers_nothing_is_not_asked_the_time_for_each_payment(
    tmp_path: Path,
) -> None:
    # A server that is down (every connection refused): each new payment of one process
    # paid a probe (up to its timeout, where it hangs) before it was tried. The
    # question is asked once, and not again for ASK_AGAIN_AFTER.
    sent: list[str] = []

    def down(request: httpx.Request) -> httpx.Response:
        sent.append(request.method)
        raise httpx.ConnectError("connection refused", request=request)

    clock = ManualClock()
    options = _one_attempt_against(down, "https://psp.test", tmp_path, clock)
    with Client(**options) as client:
        for reference in ("inv-1", "inv-2", "inv-3"):
            with pytest.raises(NotSent):
                client.post("/v1/payments", json={"reference": reference}, operation_id=reference)
        assert sent == ["HEAD", "POST", "POST", "POST"]
        clock.advance(ASK_AGAIN_AFTER)
        with pytest.raises(NotSent):
            client.post("/v1/payments", json={"reference": "inv-4"}, operation_id="inv-4")
        assert sent[-2:] == ["HEAD", "POST"]  # asked again, after a while


def test_a_client_calling_many_hosts_keeps_a_bounded_number_of_dates() -> None:
    # Every answer's Date is noted per origin, a passed-through GET's too: a client that
    # also calls its merchants' hosts (webhooks, say) kept one entry per host for ever
    # (about 370 bytes each: 37 MB per 100,000 hosts).
    def dated(request: httpx.Request) -> httpx.Response:
        return httpx.Response(204, headers={"date": "Wed, 02 Dec 2026 06:00:00 GMT"})

    hosts = [f"https://merchant-{n}.test/hooks" for n in range(MAX_ORIGINS + 50)]
    with Client(transport=httpx.MockTransport(dated), store=":memory:") as client:
        for url in hosts:
            client.get(url)
        times = client.settings.server_times
        assert times is not None
        assert times.knows(origin_of(httpx.URL(hosts[-1])))
        assert not times.knows(origin_of(httpx.URL(hosts[0])))  # forgotten, not kept
        assert sum(times.knows(origin_of(httpx.URL(url))) for url in hosts) == MAX_ORIGINS


class MethodBlindCapture:
    """A merchant's own payments service whose capture view does not check the method
    (a plain view that captures whatever the request is, e.g. Django without
    `require_POST`: CSRF does not stop a HEAD), and dedupes by Idempotency-Key. Its
    first answer is lost after the capture (a read timeout)."""

    def __init__(self) -> None:
        self.captures: list[str] = []
        self.keys: set[str] = set()
        self.lose_next = True
        self.probed: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        headers = {"date": "Wed, 02 Dec 2026 06:00:00 GMT"}
        if request.method == "HEAD":
            self.probed.append(request.url.path)
        if request.url.path != "/v1/payments/pi_1/capture":
            return httpx.Response(404, headers=headers)
        key = request.headers.get("idempotency-key")
        if key is not None and key in self.keys:
            return httpx.Response(200, json={"status": "captured"}, headers=headers)
        if key is not None:
            self.keys.add(key)
        self.captures.append(request.method)
        if self.lose_next:
            self.lose_next = False
            raise httpx.ReadTimeout("answer lost", request=request)
        return httpx.Response(200, json={"status": "captured"}, headers=headers)


def test_the_time_probe_does_not_reach_the_payment_endpoint(tmp_path: Path) -> None:
    server = MethodBlindCapture()
    clock = ManualClock(start=1_796_191_200.0)
    options = _one_attempt_against(server, "https://payments.internal.test", tmp_path, clock)
    with Client(**options) as client, pytest.raises(Indeterminate):
        client.post("/v1/payments/pi_1/capture", operation_id="capture-pi_1")
    clock.advance(HOUR)
    with Client(**options) as client:  # the worker restarted: resumed
        client.post("/v1/payments/pi_1/capture", operation_id="capture-pi_1")
    assert server.captures == ["POST"], server.captures
    assert server.probed == ["/", "/"]  # each process asked the time of the origin


def test_a_record_stamped_before_the_client_started_but_after_its_set_back_start(
    tmp_path: Path,
) -> None:
    # Set back 24 h while no client ran: a record stamped in the 24 h before looks
    # stamped after the new client started, as if this clock had watched it. Held: the
    # store sees its stamps ahead of the clock, and keeps the step.
    shop = Shop(tmp_path, "reference")  # keys kept 24 h, reaped 25 h after the stamp
    try:
        shop.server.delay(120.0)
        assert isinstance(shop.pay("client"), Indeterminate)  # applied, answer lost
        shop.world.advance(20 * HOUR)
        shop.client_clock.offset = -24 * HOUR  # set back while no client ran
        with Client(base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()) as c:
            # A long-running worker: the record, stamped before it started, looked
            # 4 h in the future when it did, and by now looks 6 h old.
            shop.world.advance(10 * HOUR)
            shop.server.reap()
            with pytest.raises(ReconcileRequired, match="clock of this store was seen to go"):
                c.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
        assert shop.applied() == 1
    finally:
        shop.close()


def test_the_reference_server_s_default_clock_does_not_refuse_a_resume(tmp_path: Path) -> None:
    # A user's crash-recovery test, as the README, examples/resume_after_crash.py and
    # the pytest plugin's `reference_server` fixture build the server (clock left out:
    # a ManualClock at 1.8e9, weeks from today). Its Date, sent, made a fresh Client on
    # the real clock refuse the payment as "3805339s old by the server's clock (0s by
    # this host's)" where it was answered from its key.
    body = {"amount": 700, "currency": "EUR", "reference": "inv-1"}
    headers = {"Authorization": "Bearer shop-1"}
    with ReferenceServer() as server:  # as docs/server.md shows it, clock left out
        options: dict[str, Any] = {
            "base_url": "https://psp.test",
            "transport": server.transport,
            "headers": headers,
            "store": tmp_path / "s.db",
            "policy": RetryPolicy(max_attempts=1),
        }
        server.drop()  # applied, then the connection is cut: maybe applied
        with Client(**options) as client, pytest.raises(Indeterminate):
            client.post("/v1/payments", json=body, operation_id="inv-1")
        with Client(**options) as client:  # the test's "after the crash" process
            outcome = client.post("/v1/payments", json=body, operation_id="inv-1")
        assert outcome.status_code == 201 or outcome.is_success, outcome
        assert sum(1 for entry in server.ledger() if entry.status == "succeeded") == 1


def test_a_probe_cancelled_in_an_async_task_gives_the_lease_back(tmp_path: Path) -> None:
    shop = Shop(tmp_path, "reference")
    try:
        _paid_then_timed_out(shop, "client")
        shop.world.advance(HOUR)
        inner = shop.wire.inner

        class HeadNeverAnswers(httpx.AsyncBaseTransport):
            def __init__(self) -> None:
                self.asked = asyncio.Event()

            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                if request.method == "HEAD":
                    self.asked.set()
                    await asyncio.Event().wait()  # until cancelled
                response: httpx.Response = await inner.handle_async_request(request)
                return response

        async def cancelled_then_again() -> object:
            hanging = HeadNeverAnswers()
            shop.wire.inner = hanging
            async with AsyncClient(
                base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()
            ) as client:
                task = asyncio.ensure_future(
                    client.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
                )
                await hanging.asked.wait()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            shop.wire.inner = inner
            async with AsyncClient(
                base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()
            ) as client:
                return await client.post(
                    shop.payments, json=shop.body("inv-1"), operation_id="inv-1"
                )

        outcome = asyncio.run(cancelled_then_again())
        assert shop.wire.sent[-1] == "POST", (shop.wire.sent, outcome)
        assert shop.record().state is State.SUCCEEDED, outcome
        assert shop.applied() == 1
    finally:
        shop.close()
