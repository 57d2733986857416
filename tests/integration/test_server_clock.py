"""An outside clock, the server's `Date`, before a maybe-applied operation is sent again.

This host's clock stepped while no client ran leaves nothing in the store that shows it:

- set back: a maybe-applied operation looks younger than the server's key retention
  after the server has let its key go, and sent again it is paid twice;
- stepped forward: the in-flight hold looks over while the server still holds the first
  attempt (a server that does not refuse a second request meanwhile pays both).

With `time_probe=True`, a process that has heard no `Date` from the server asks for
one first (a HEAD), and judges by both clocks: in the safe direction, each. Through
`Client`, `AsyncClient`, `wrap()` and the batch, against the reference server in
process (its clock and the client's apart on one timeline), and over a loopback socket.
By default nothing but the caller's requests is sent: the time is read from the
answers they get, and a step back below the latest time the store has seen written is
seen from the store itself (the last tests here).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    IdemError,
    Indeterminate,
    ManualClock,
    ReconcileRequired,
    RetryPolicy,
    State,
    key_from_identity,
    profiles,
    wrap,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch import read_batch, submit
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer, serve
from tests.checker.world import Clock, World

Handler = Callable[[httpx.Request, httpx.BaseTransport], httpx.Response]

HOUR = 3600.0
BASE = "https://psp.test"
TOKEN = "shop-1"
WAYS = ("client", "async", "wrap", "batch")


class Counting(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The wire to the in-process server, counting what goes out by method."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.method)
        response: httpx.Response = self.inner.handle_request(request)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.method)
        response: httpx.Response = await self.inner.handle_async_request(request)
        return response


class _Rewired(httpx.BaseTransport):
    def __init__(self, handle: Handler, inner: httpx.BaseTransport) -> None:
        self.handle, self.inner = handle, inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.handle(request, self.inner)


class Shop:
    """One shop's processes (each a fresh client on one store file), and its PSP: the
    reference server, on a clock of its own on the same timeline."""

    def __init__(
        self, tmp_path: Path, profile: str, *, server_clock: bool = True, time_probe: bool = True
    ) -> None:
        self.world = World()
        self.client_clock = Clock(self.world)
        self.server_clock = Clock(self.world)
        self.profile = profiles.named(profile)
        self.server = ReferenceServer(profile=self.profile, clock=self.server_clock)
        self.wire = Counting(self.server.transport)
        self.path = str(tmp_path / "shop.db")
        self.tmp = tmp_path
        self.server_clock_on = server_clock
        self.time_probe = server_clock and time_probe
        self.payments = "/v2/checkout/orders" if profile == "paypal" else "/v1/payments"

    def options(self) -> dict[str, Any]:
        return {
            "store": self.path,
            "clock": self.client_clock,
            "policy": RetryPolicy(max_attempts=1, deadline=60.0),
            "profile": self.profile,
            "server_clock": self.server_clock_on,
            "time_probe": self.time_probe,
        }

    def body(self, reference: str) -> dict[str, Any]:
        body: dict[str, Any] = {"amount": 700, "currency": "EUR", "reference": reference}
        slot = self.profile.resolve("POST", self.payments, frozenset({"POST"})).key
        if slot.field is not None:
            body[slot.field] = key_from_identity("shop", reference)
        return body

    def through(self, handle: Handler) -> Any:
        """Put `handle` (given each request and the wire's transport) between the
        shop's clients and its server, from now on; the transport it replaced."""
        inner = self.wire.inner
        self.wire.inner = _Rewired(handle, inner)
        return inner

    def pay(self, way: str, reference: str = "inv-1") -> object:
        """One application process pays `reference` (again): its outcome or error."""
        try:
            if way == "client":
                with Client(
                    base_url=BASE, transport=self.wire, auth=_bearer, **self.options()
                ) as client:
                    return client.post(
                        self.payments, json=self.body(reference), operation_id=reference
                    )
            if way == "async":

                async def go() -> object:
                    async with AsyncClient(
                        base_url=BASE, transport=self.wire, auth=_bearer, **self.options()
                    ) as client:
                        return await client.post(
                            self.payments, json=self.body(reference), operation_id=reference
                        )

                return asyncio.run(go())
            if way == "wrap":
                http = httpx.Client(transport=self.wire, base_url=BASE, auth=_bearer)
                wrap(http, **self.options())
                key = key_from_identity("shop", reference)
                slot = self.profile.resolve("POST", self.payments, frozenset({"POST"})).key
                headers = {} if slot.header is None else {slot.header: slot.header_value(key)}
                with http:
                    return http.post(self.payments, json=self.body(reference), headers=headers)
            csv = os.path.join(self.tmp, "payouts.csv")
            with open(csv, "w") as out:
                out.write(f"ref,amount,currency,value_date\n{reference},700,EUR,2026-12-01\n")
            with Client(base_url=BASE, transport=self.wire, auth=_bearer, **self.options()) as c:
                return submit(read_batch(csv), c, path="/v1/payouts", concurrency=1, lookup=None)
        except IdemError as error:
            return error

    def record(self) -> Any:
        with SQLiteStore(self.path) as store:
            (record,) = store.operations()
            return record

    def applied(self) -> int:
        return sum(1 for entry in self.server.ledger() if entry.status == "succeeded")

    def close(self) -> None:
        self.server.close()


def _bearer(request: httpx.Request) -> httpx.Request:
    request.headers["Authorization"] = f"Bearer {TOKEN}"
    return request


@pytest.fixture
def shops(tmp_path: Path) -> Iterator[list[Shop]]:
    made: list[Shop] = []
    yield made
    for shop in made:
        shop.close()


def _shop(shops: list[Shop], tmp_path: Path, profile: str, **options: Any) -> Shop:
    shop = Shop(tmp_path, profile, **options)
    shops.append(shop)
    return shop


def _paid_then_timed_out(shop: Shop, way: str) -> None:
    """The first process's attempt is applied, and its answer never comes."""
    shop.server.delay(120.0)  # past the attempt's read timeout: applied, then a timeout
    first = shop.pay(way)
    if way == "batch":
        assert first.rows[0].state == "indeterminate"  # type: ignore[attr-defined]
    else:
        assert isinstance(first, Indeterminate), first
    assert shop.applied() == 1


@pytest.mark.parametrize("way", WAYS)
def test_a_clock_set_back_while_no_client_ran_is_seen_by_the_server_s_date(
    shops: list[Shop], tmp_path: Path, way: str
) -> None:
    # Reference profile: keys kept 24 hours (reaped 25 hours after they were stamped).
    shop = _shop(shops, tmp_path, "reference")
    _paid_then_timed_out(shop, way)
    shop.world.advance(30 * HOUR)
    shop.server.reap()  # the server has let the key go
    shop.client_clock.offset = -10 * HOUR  # set back while no process of the shop ran
    shop.wire.sent.clear()
    again = shop.pay(way)
    # Twenty hours old by this clock, thirty by the server's: looked up, never sent.
    assert "POST" not in shop.wire.sent
    assert shop.wire.sent == ["HEAD"]  # the probe, once
    if way == "batch":
        (row,) = again.rows  # type: ignore[attr-defined]
        assert row.state == "indeterminate", row
        assert "retention" in row.reason
    else:
        assert isinstance(again, ReconcileRequired), again
        assert "past the server's key retention" in str(again)
        assert re.search(r"by the server's clock \(7\d{4}s by this host's\)", str(again))
    assert shop.applied() == 1


def test_with_the_server_clock_off_the_same_history_pays_twice(
    shops: list[Shop], tmp_path: Path
) -> None:
    # What the switch costs, and what the test above would see without the judgement:
    # judged by this clock alone, the operation looks twenty hours old and is sent.
    shop = _shop(shops, tmp_path, "reference", server_clock=False)
    _paid_then_timed_out(shop, "client")
    shop.world.advance(30 * HOUR)
    shop.server.reap()
    shop.client_clock.offset = -10 * HOUR
    shop.wire.sent.clear()
    shop.pay("client")
    assert shop.wire.sent == ["POST"]  # no probe
    assert shop.applied() == 2


@pytest.mark.parametrize("way", WAYS)
def test_a_clock_stepped_forward_while_no_client_ran_keeps_the_hold(
    shops: list[Shop], tmp_path: Path, way: str
) -> None:
    # PayPal's server does not refuse a second request while the first runs: a maybe-
    # applied attempt is held for in_flight_for (and the hosts' skew) before a re-send.
    shop = _shop(shops, tmp_path, "paypal")
    shop.server.crash("ADMITTED")  # admitted, not begun; it dies holding the key
    first = shop.pay(way)
    if way != "batch":
        assert isinstance(first, Indeterminate), first
    shop.client_clock.offset = HOUR  # stepped an hour on while no process ran
    shop.wire.sent.clear()
    again = shop.pay(way)
    # An hour after the send by this clock, seconds by the server's: still held.
    assert "POST" not in shop.wire.sent
    if way == "batch":
        (row,) = again.rows  # type: ignore[attr-defined]
        assert row.state == "indeterminate", row
    else:
        assert isinstance(again, Indeterminate), again
        assert again.outcome.not_before is not None
        # Held until in_flight_for and the skew have passed by the server's clock too,
        # given on this clock.
        held = shop.profile.in_flight_for + CLOCK_SKEW
        assert again.outcome.not_before >= shop.client_clock.time() + held - 60
    # The server's recovery finishes the first; once the hold is over by both clocks,
    # the operation is sent under its key and answered from it: paid once.
    shop.world.advance(shop.server.lease + 1)
    shop.server.recover()
    shop.world.advance(shop.profile.in_flight_for + CLOCK_SKEW)
    last = shop.pay(way)
    assert shop.record().state is State.SUCCEEDED, last
    assert shop.applied() == 1


def test_a_probe_that_fails_leaves_the_judgement_to_this_clock(
    shops: list[Shop], tmp_path: Path
) -> None:
    # Never worse than without the probe: no answer, no server time; sent as before.
    shop = _shop(shops, tmp_path, "reference")
    _paid_then_timed_out(shop, "client")

    def no_head(request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        if request.method == "HEAD":
            raise httpx.ConnectError("no route", request=request)
        return inner.handle_request(request)

    shop.through(no_head)
    shop.world.advance(HOUR)
    outcome = shop.pay("client")
    assert shop.wire.sent[-2:] == ["HEAD", "POST"]
    assert not isinstance(outcome, IdemError), outcome
    assert shop.record().state is State.SUCCEEDED
    assert shop.applied() == 1


def test_an_answer_without_a_date_leaves_the_judgement_to_this_clock(
    shops: list[Shop], tmp_path: Path
) -> None:
    shop = _shop(shops, tmp_path, "reference")
    _paid_then_timed_out(shop, "client")

    def undated(request: httpx.Request, inner: httpx.BaseTransport) -> httpx.Response:
        response = inner.handle_request(request)
        del response.headers["date"]
        return response

    shop.through(undated)
    shop.world.advance(30 * HOUR)
    shop.server.reap()
    shop.client_clock.offset = -10 * HOUR
    shop.pay("client")
    # As before the probe: twenty hours old by this clock, sent (and, the key gone,
    # paid again: what a server without a Date leaves a client to).
    assert shop.wire.sent[-2:] == ["HEAD", "POST"]
    assert shop.applied() == 2


def test_one_probe_per_process_and_none_once_a_date_was_heard(
    shops: list[Shop], tmp_path: Path
) -> None:
    shop = _shop(shops, tmp_path, "reference")
    shop.server.delay(120.0, times=2)
    with Client(base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()) as client:
        for reference in ("a", "b"):
            with pytest.raises(Indeterminate):
                client.post(shop.payments, json=shop.body(reference), operation_id=reference)
        # Both attempts timed out: no answer, nothing heard from the origin yet. Any
        # answer (here a look-up's GET) tells this process the server's time: a
        # maybe-applied operation re-issued after it asks no probe.
        shop.wire.sent.clear()
        client.get("/v1/payments?reference=a")  # any answer tells the time
        client.post(shop.payments, json=shop.body("a"), operation_id="a")
        assert shop.wire.sent == ["GET", "POST"]
    shop.wire.sent.clear()
    shop.pay("client", "b")  # a new process: one probe
    assert shop.wire.sent == ["HEAD", "POST"]


def test_the_probe_reads_the_live_server_s_date_over_a_socket(tmp_path: Path) -> None:
    # The reference server on 127.0.0.1 sends one Date, from its own clock (not
    # uvicorn's from the host's): a day ahead of the real time here.
    server_clock = ManualClock(start=1_900_000_000.0)
    client_clock = ManualClock(start=1_900_000_000.0)
    with ReferenceServer(clock=server_clock) as server, serve(server) as live:
        options: dict[str, Any] = {
            "base_url": live.url,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "store": tmp_path / "s.db",
            "clock": client_clock,
            "policy": RetryPolicy(max_attempts=1),
            "time_probe": True,
        }
        body = {"amount": 700, "currency": "EUR", "reference": "inv-9"}
        server.drop()  # applied, then the connection is cut: maybe applied
        with Client(**options) as client, pytest.raises(Indeterminate):
            client.post("/v1/payments", json=body, operation_id="o")
        raw = httpx.head(live.url + "/v1/payments")
        assert raw.headers.get_list("date") == [raw.headers["date"]]  # one Date
        server_clock.advance(30 * HOUR)
        server.reap()
        client_clock.advance(20 * HOUR)  # this clock lost ten hours meanwhile
        with Client(**options) as client:
            with pytest.raises(ReconcileRequired, match="past the server's key retention"):
                client.post("/v1/payments", json=body, operation_id="o")
            seen = client.settings.server_time(httpx.URL(live.url), stamped=0.0)
            assert seen is not None
            assert seen.low <= server_clock.time() < seen.high + 1
        assert sum(1 for entry in server.ledger() if entry.status == "succeeded") == 1


def test_a_running_client_judges_its_own_stamps_by_its_own_clock(
    shops: list[Shop], tmp_path: Path
) -> None:
    # A server clock weeks ahead (a test's ManualClock server beside a client on the
    # real clock, or a server set wrong): while the client runs it watches its own
    # clock, so what it stamped since it started is judged by that clock. A 500 is
    # retried under the same key, not stopped as weeks old.
    shop = _shop(shops, tmp_path, "reference")
    shop.server_clock.offset = 40 * 24 * HOUR
    shop.server.answer(500)
    with Client(
        base_url=BASE,
        transport=shop.wire,
        auth=_bearer,
        **{**shop.options(), "policy": RetryPolicy(max_attempts=2)},
    ) as client:
        outcome = client.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
    assert outcome.state is State.SUCCEEDED
    assert shop.wire.sent == ["HEAD", "POST", "POST"]  # the time asked once, first
    # A later process cannot tell that server from its own clock set back weeks while
    # nothing ran: a maybe-applied operation it did not stamp is looked up, never sent.
    shop.server.delay(120.0)
    assert isinstance(shop.pay("client", "inv-2"), Indeterminate)
    again = shop.pay("client", "inv-2")
    assert isinstance(again, ReconcileRequired), again
    assert shop.applied() == 2


# By default (no `time_probe`): nothing but the caller's own requests.


@pytest.mark.parametrize("way", WAYS)
def test_by_default_a_client_sends_only_the_callers_requests(
    shops: list[Shop], tmp_path: Path, way: str
) -> None:
    shop = _shop(shops, tmp_path, "reference", time_probe=False)
    outcome = shop.pay(way)
    assert not isinstance(outcome, IdemError), outcome
    assert shop.wire.sent == ["POST"]  # no HEAD before the first operation
    assert shop.applied() == 1


def test_by_default_the_servers_time_is_learnt_from_the_answers_and_kept(
    shops: list[Shop], tmp_path: Path
) -> None:
    # A process's first operation is recorded before any answer came: it keeps no
    # server time. Its later operations keep the server's time from the answers the
    # earlier ones got (here 40 days ahead of this clock, so the two are told apart).
    shop = _shop(shops, tmp_path, "reference", time_probe=False)
    shop.server_clock.offset = 40 * 24 * HOUR
    with Client(base_url=BASE, transport=shop.wire, auth=_bearer, **shop.options()) as client:
        client.post(shop.payments, json=shop.body("inv-1"), operation_id="inv-1")
        client.post(shop.payments, json=shop.body("inv-2"), operation_id="inv-2")
    assert shop.wire.sent == ["POST", "POST"]
    with SQLiteStore(shop.path) as store:
        first, second = (store.get(f"inv-{n}") for n in (1, 2))
    assert first is not None
    assert second is not None
    assert first.server_created_at is None
    assert second.server_created_at is not None
    assert abs(second.server_created_at - shop.server_clock.time()) < 5


@pytest.mark.parametrize("way", WAYS)
def test_by_default_a_step_back_below_the_stores_latest_write_is_seen_without_asking(
    shops: list[Shop], tmp_path: Path, way: str
) -> None:
    # The first process's attempt is applied and times out; a day later another
    # process of the shop pays another invoice (the store's latest time now); the host's
    # clock is then set back ten hours, while no process runs. The next process reads
    # its clock behind the store's latest time: the step is kept, and the maybe-applied
    # operation, recorded before it, is of unknown age: looked up, never sent again.
    shop = _shop(shops, tmp_path, "reference", time_probe=False)
    _paid_then_timed_out(shop, way)
    shop.world.advance(30 * HOUR)
    shop.server.reap()  # the server has let the first key go
    assert not isinstance(shop.pay("client", "inv-2"), IdemError)
    shop.client_clock.offset = -10 * HOUR
    shop.wire.sent.clear()
    again = shop.pay(way)
    assert shop.wire.sent == []  # nothing sent: not the operation, not a probe
    if way == "batch":
        (row,) = again.rows  # type: ignore[attr-defined]
        assert row.state == "indeterminate", row
    else:
        assert isinstance(again, ReconcileRequired), again
        assert "clock of this store was seen to go back" in str(again)
    assert shop.applied() == 2  # inv-1 once, inv-2 once


def test_a_time_probe_without_the_server_clock_is_refused(tmp_path: Path) -> None:
    # The probe asks the time for the server-clock judgement: with that turned off it
    # would be a request whose answer nothing reads. Refused before anything is opened.
    with pytest.raises(ValueError, match=r"time_probe=True .* server_clock=False"):
        Client(store=tmp_path / "s.db", server_clock=False, time_probe=True)
    assert not (tmp_path / "s.db").exists()
