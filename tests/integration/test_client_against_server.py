"""The client against the reference server: every fault, exactly one effect in the ledger.

Each test runs twice: in-process (the server's transport, no socket) and over a real
loopback socket (uvicorn in a thread). Client and server share one ManualClock, so a
client sleeping out a Retry-After or a 409 also ages the server's leases; nothing
really sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    KeyConflict,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
)
from idemclient.testing import LedgerEntry, ReferenceServer, serve

PAYMENT = {"amount": 1250, "currency": "EUR", "reference": "inv-1"}


@dataclass
class Env:
    server: ReferenceServer
    clock: ManualClock
    store: Path
    url: str
    transport: httpx.BaseTransport | None

    def client(self, token: str = "merchant-1", **options: object) -> Client:
        extra: dict[str, object] = {} if self.transport is None else {"transport": self.transport}
        return Client(
            store=self.store,
            clock=self.clock,
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            **extra,
            **options,  # type: ignore[arg-type]
        )

    def only_entry(self) -> LedgerEntry:
        [entry] = self.server.ledger()
        return entry


def exactly_once(entry: LedgerEntry) -> bool:
    return (entry.ext1_applied, entry.ext2_applied) == (1, 1) and entry.journal == (
        "H1",
        "H2",
        "H3",
    )


@pytest.fixture(params=["in-process", "socket"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    clock = ManualClock()
    with ReferenceServer(clock=clock) as server:
        if request.param == "in-process":
            yield Env(server, clock, tmp_path / "c.db", "http://psp.test", server.transport)
        else:
            with serve(server) as live:
                yield Env(server, clock, tmp_path / "c.db", live.url, None)


def test_a_plain_payment(env: Env) -> None:
    with env.client() as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.status_code == 201
    assert outcome.response is not None
    body = outcome.response.json()
    entry = env.only_entry()
    assert (body["id"], entry.idempotency_key) == (entry.resource_id, outcome.key)
    assert exactly_once(entry)


@pytest.mark.parametrize(
    "retry_after",
    [
        {"retry_after": 3},  # seconds
        {"retry_after_ms": 2500},  # milliseconds
        {"retry_after_date_in": 4},  # an HTTP-date
    ],
)
def test_throttled_then_paid_once_honouring_every_retry_after_form(
    env: Env, retry_after: dict[str, int]
) -> None:
    env.server.answer(503, times=1, path="/v1/payments", **retry_after)  # type: ignore[arg-type]
    env.server.answer(429, times=1, path="/v1/payments", **retry_after)  # type: ignore[arg-type]
    with env.client() as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.attempts == 3
    floor = next(iter(retry_after.values())) / (1000 if "retry_after_ms" in retry_after else 1)
    assert all(wait >= floor - 1e-6 for wait in env.clock.sleeps)
    assert exactly_once(env.only_entry())


def test_apply_then_drop_is_retried_and_replayed(env: Env) -> None:
    env.server.drop(path="/v1/payments")
    with env.client() as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed  # the first attempt did the work
    assert outcome.attempts == 2
    assert exactly_once(env.only_entry())


def test_a_crash_after_every_phase_is_finished_by_the_retry(env: Env) -> None:
    phases = ["ADMITTED", "H1_DONE", "EXT1_SENT", "EXT1_DONE", "H2_DONE", "EXT2_SENT", "EXT2_DONE"]
    # The server's lease is 30 s and each 409 asks for 1 s: at the lowest jitter the
    # lease lapses only after 31 of them (33 attempts with the drop and the last), so
    # 40 attempts fit any draw, and 120 s fits the highest (5 s a wait).
    policy = RetryPolicy(deadline=120.0, max_attempts=40, max_backoff=5.0)
    with env.client(policy=policy) as client:
        for n, phase in enumerate(phases):
            env.server.crash(phase, path="/v1/payments")
            payment = {**PAYMENT, "reference": f"inv-{n}"}
            outcome = client.post("/v1/payments", json=payment)
            assert outcome.state is State.SUCCEEDED, phase
            assert outcome.attempts >= 2, phase  # dropped, then 409s until the lease lapsed
    ledger = env.server.ledger()
    assert len(ledger) == len(phases)
    assert all(exactly_once(entry) for entry in ledger)


def test_an_external_timeout_gives_202_then_the_retry_finishes_it(env: Env) -> None:
    env.server.external_fault(2, "timeout", times=2)  # the call and its inline probe
    with env.client() as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 2  # 202 Accepted, polled with the same key
    assert exactly_once(env.only_entry())


def test_an_external_system_that_applied_then_timed_out_is_probed_not_called_twice(
    env: Env,
) -> None:
    env.server.external_fault(1, "apply_then_timeout", times=2)
    with env.client() as client:
        assert client.post("/v1/payments", json=PAYMENT).succeeded
    entry = env.only_entry()
    assert exactly_once(entry)


@pytest.mark.parametrize("system", [1, 2])
def test_an_external_outage_is_never_told_as_not_sent_when_recovery_finishes_it(
    env: Env, system: int
) -> None:
    # The server admitted the payment and ran its first phase (and, at system 2, had
    # system 1 apply its part); the outage parks the row for its recovery worker. The
    # client's one attempt must not end "not sent": the payment goes on without it.
    env.server.external_fault(system, "down", times=2)  # the call and its inline probe
    with env.client(policy=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(Indeterminate) as caught:
            client.post("/v1/payments", json=PAYMENT, operation_id="order-out")
        assert not isinstance(caught.value, NotSent)
        assert caught.value.outcome.maybe_applied
        env.server.recover()  # no retry from the client: the server finishes it alone
        assert exactly_once(env.only_entry())
        [resumed] = client.resume()
    assert resumed.state is State.SUCCEEDED
    assert exactly_once(env.only_entry())


def test_no_answer_at_all_ends_indeterminate_and_resume_settles_it(env: Env) -> None:
    env.server.drop(path="/v1/payments", times=8)
    with env.client() as client:
        with pytest.raises(Indeterminate) as caught:
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
        assert caught.value.outcome.state is State.INDETERMINATE
        [resumed] = client.resume()
    assert resumed.state is State.SUCCEEDED
    assert resumed.replayed
    assert resumed.key == caught.value.key
    assert exactly_once(env.only_entry())


def test_a_key_reused_for_another_payment_is_refused_loudly(env: Env) -> None:
    with env.client() as client:
        client.post("/v1/payments", json=PAYMENT, key="shared-key")
    env.store = env.store.with_name("another-application.db")  # no local record of it
    with env.client() as other, pytest.raises(KeyConflict):
        other.post("/v1/payments", json={**PAYMENT, "amount": 1}, key="shared-key")
    assert len(env.server.ledger()) == 1


def test_keys_are_per_client_on_the_server(env: Env) -> None:
    with env.client("merchant-1") as one:
        first = one.post("/v1/payments", json=PAYMENT, key="order-1")
    env.store = env.store.with_name("merchant-2.db")
    with env.client("merchant-2") as two:
        second = two.post("/v1/payments", json=PAYMENT, key="order-1")
    assert not second.replayed
    assert first.response is not None
    assert second.response is not None
    assert first.response.json()["id"] != second.response.json()["id"]
    assert len(env.server.ledger()) == 2


def test_a_missing_token_ends_not_sent(env: Env) -> None:
    extra = {} if env.transport is None else {"transport": env.transport}
    anonymous = Client(store=env.store, clock=env.clock, base_url=env.url, **extra)
    with anonymous, pytest.raises(NotSent, match="401"):
        anonymous.post("/v1/payments", json=PAYMENT)
    assert env.server.ledger() == ()


def test_a_refusal_after_a_dropped_answer_is_indeterminate_then_settled(env: Env) -> None:
    """Applied, the answer lost; the retry is refused (a proxy, a server that does not
    replay): that refusal may be about a duplicate, so it is no answer."""
    env.server.drop(path="/v1/payments")
    env.server.answer(422, path="/v1/payments")
    with env.client() as client:
        with pytest.raises(Indeterminate) as caught:
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
        assert caught.value.outcome.last_status == 422
        [resumed] = client.resume()
    assert (resumed.state, resumed.replayed) == (State.SUCCEEDED, True)
    assert exactly_once(env.only_entry())


def test_a_refusal_after_a_dropped_answer_is_final_where_the_server_replays(env: Env) -> None:
    env.server.drop(path="/v1/payments")
    env.server.answer(402, path="/v1/payments")
    with env.client(policy=RetryPolicy(server_replays=True)) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.status_code) == (State.FAILED, 402)


def test_a_same_origin_redirect_is_followed_with_the_same_key(env: Env) -> None:
    env.server.answer(307, path="/v1/payments", headers={"location": "/v1/payments"})
    with env.client(follow_redirects=True) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.attempts) == (State.SUCCEEDED, 2)
    entry = env.only_entry()
    assert entry.idempotency_key == outcome.key
    assert exactly_once(entry)


class _TokenOnChallenge(httpx.Auth):
    """Sends no credentials until the server asks (a 401), then sends them."""

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = "Bearer merchant-1"
            yield request


def test_a_401_goes_to_the_auth_flow_and_the_operation_continues(env: Env) -> None:
    extra = {} if env.transport is None else {"transport": env.transport}
    with Client(
        store=env.store, clock=env.clock, base_url=env.url, auth=_TokenOnChallenge(), **extra
    ) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.attempts) == (State.SUCCEEDED, 2)
    assert exactly_once(env.only_entry())


def test_a_server_wait_beyond_the_deadline_is_recorded_not_slept(env: Env) -> None:
    env.server.answer(503, path="/v1/payments", retry_after=datetime(2027, 6, 1, tzinfo=UTC))
    with env.client() as client, pytest.raises(NotSent) as caught:
        client.post("/v1/payments", json=PAYMENT)
    assert env.clock.sleeps == []
    assert caught.value.outcome.not_before == datetime(2027, 6, 1, tzinfo=UTC).timestamp()


@pytest.mark.anyio
async def test_the_async_client_against_the_server(env: Env) -> None:
    env.server.drop(path="/v1/payments")
    env.server.answer(503, path="/v1/payments", retry_after=1)
    extra: dict[str, object] = {} if env.transport is None else {"transport": env.transport}
    async with AsyncClient(
        store=env.store,
        clock=env.clock,
        base_url=env.url,
        headers={"Authorization": "Bearer merchant-1"},
        **extra,  # type: ignore[arg-type]
    ) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT)
    assert outcome.succeeded
    assert exactly_once(env.only_entry())
