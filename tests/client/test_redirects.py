"""Redirects: httpx follows them above the transport, one hop at a time. A same-origin
307/308 continues the same operation with the same key; a hop to another origin is
refused before anything is sent there; a redirect httpx turns into a GET leaves the
operation indeterminate unless the GET's answer settles it (a 303 See Other)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

import idemclient
from idemclient import AsyncClient, Client, Indeterminate, ManualClock, State, outcome_of

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


class Redirecting:
    """A PSP that moved its endpoint: /v1/payments answers with a redirect (once per
    key, or always), /v2/payments pays, deduplicating on the key."""

    def __init__(self, status: int, location: str, *, times: int = 1) -> None:
        self.status = status
        self.location = location
        self.times = times
        self.seen: list[tuple[str, str, str | None, str | None]] = []
        #: the client's questions for the server's time (HEAD), apart: they do nothing
        self.probes: list[str] = []
        self.effects: Counter[str] = Counter()
        self.answers: dict[str, bytes] = {}

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            self.probes.append(str(request.url))
            return httpx.Response(200)
        key = request.headers.get("idempotency-key")
        auth = request.headers.get("authorization")
        self.seen.append((request.method, str(request.url), key, auth))
        if request.url.host != "psp.test":
            return httpx.Response(201, json={"id": "pay_stolen"})
        if request.method == "POST" and request.url.path == "/v1/payments" and self.times:
            self.times -= 1
            if self.status == 303:  # processed here; the result lives elsewhere
                self._pay(key, request)
            return httpx.Response(self.status, headers={"location": self.location})
        if request.method == "GET" and request.url.path.startswith("/v2/payments/"):
            name = request.url.path.rsplit("/", 1)[-1]
            return httpx.Response(200, json={"id": name, "status": "succeeded"})
        if request.method == "POST":
            if key is None:
                return httpx.Response(400, json={"error": "missing key"})
            replayed = key in self.answers
            body = self._pay(key, request)
            headers = {"Idempotent-Replayed": "true"} if replayed else {}
            return httpx.Response(201, headers=headers, content=body)
        return httpx.Response(405)

    def _pay(self, key: str | None, request: httpx.Request) -> bytes:
        assert key is not None
        if key not in self.answers:
            self.effects[key] += 1
            body = {"id": f"pay_{len(self.answers) + 1}", **json.loads(request.read())}
            self.answers[key] = json.dumps(body).encode()
        return self.answers[key]


def make(psp: Redirecting, tmp_path: Path, **options: object) -> Client:
    return Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("code", [307, 308])
def test_a_same_origin_307_308_continues_the_operation_with_its_key(
    tmp_path: Path, code: int
) -> None:
    psp = Redirecting(code, "/v2/payments")
    with make(psp, tmp_path, follow_redirects=True) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        again = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert (outcome.state, outcome.status_code) == (State.SUCCEEDED, 201)
    assert outcome.attempts == 2
    [(_, first, key1, _), (_, second, key2, _)] = psp.seen
    assert (first, second) == ("https://psp.test/v1/payments", "https://psp.test/v2/payments")
    assert key1 == key2 == outcome.key
    assert psp.effects == {outcome.key: 1}
    assert again.from_store
    assert again.state is State.SUCCEEDED


def test_a_wrapped_client_follows_like_plain_httpx(tmp_path: Path) -> None:
    psp = Redirecting(308, "/v2/payments")
    http = httpx.Client(
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    )
    with idemclient.wrap(http, store=tmp_path / "c.db", clock=ManualClock()) as client:
        response = client.post("/v1/payments", json=PAYMENT)
    assert response.status_code == 201
    assert [r.status_code for r in response.history] == [308]
    outcome = outcome_of(response)
    assert outcome is not None
    assert outcome.state is State.SUCCEEDED
    assert len({key for _, _, key, _ in psp.seen}) == 1
    assert sum(psp.effects.values()) == 1


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_hop_to_another_origin_sends_nothing_there(tmp_path: Path, code: int) -> None:
    psp = Redirecting(code, "https://evil.test/collect")
    with (
        make(psp, tmp_path, follow_redirects=True, time_probe=True) as client,
        pytest.raises(Indeterminate) as raised,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert [host for _, host, _, _ in psp.seen] == ["https://psp.test/v1/payments"]
    assert psp.probes == ["https://psp.test/"]  # the operation's own origin only
    assert "another origin" in str(raised.value)
    assert raised.value.outcome.state is State.INDETERMINATE


def test_a_303_see_other_settles_the_operation_by_its_get(tmp_path: Path) -> None:
    psp = Redirecting(303, "/v2/payments/pay_1")
    with make(psp, tmp_path, follow_redirects=True) as client:
        outcome = client.post("/v1/payments", json=PAYMENT, operation_id="op")
        stored = client.operation("op")
    assert outcome.state is State.SUCCEEDED
    assert outcome.response is not None
    assert outcome.response.json() == {"id": "pay_1", "status": "succeeded"}
    assert stored is not None
    assert stored.state is State.SUCCEEDED
    [(post, _, key, _), (get, _, get_key, _)] = psp.seen
    assert (post, get, get_key) == ("POST", "GET", None)  # the key stays with the operation
    assert psp.effects == {key: 1}


@pytest.mark.parametrize("code", [301, 302])
def test_a_redirect_turned_into_a_get_leaves_it_indeterminate(tmp_path: Path, code: int) -> None:
    psp = Redirecting(code, "/v2/payments/pay_1")
    with (
        make(psp, tmp_path, follow_redirects=True) as client,
        pytest.raises(Indeterminate) as raised,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert raised.value.outcome.state is State.INDETERMINATE
    assert [m for m, _, _, _ in psp.seen] == ["POST", "GET"]


def test_a_redirect_not_followed_is_indeterminate_and_resume_finishes_it(tmp_path: Path) -> None:
    psp = Redirecting(307, "/v2/payments")
    with make(psp, tmp_path) as client:
        with pytest.raises(Indeterminate) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert raised.value.outcome.last_status == 307
        assert "307" in raised.value.outcome.evidence
        [resumed] = client.resume()  # the endpoint answers now; same key
    assert resumed.state is State.SUCCEEDED
    assert len({key for _, _, key, _ in psp.seen}) == 1


def test_a_wrapped_client_not_following_gets_the_3xx_and_an_honest_outcome(
    tmp_path: Path,
) -> None:
    psp = Redirecting(308, "/v2/payments")
    http = httpx.Client(transport=httpx.MockTransport(psp.handler), base_url="https://psp.test")
    with idemclient.wrap(http, store=tmp_path / "c.db", clock=ManualClock()) as client:
        response = client.post("/v1/payments", json=PAYMENT)
    assert response.status_code == 308
    outcome = outcome_of(response)
    assert outcome is not None
    assert (outcome.state, outcome.maybe_applied) == (State.INDETERMINATE, True)


@pytest.mark.anyio
async def test_the_async_client_follows_and_refuses_alike(tmp_path: Path) -> None:
    same = Redirecting(307, "/v2/payments")
    async with AsyncClient(
        store=tmp_path / "a.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(same.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    ) as client:
        outcome = await client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert sum(same.effects.values()) == 1
    away = Redirecting(308, "https://evil.test/")
    async with AsyncClient(
        store=tmp_path / "b.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(away.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    ) as client:
        with pytest.raises(Indeterminate):
            await client.post("/v1/payments", json=PAYMENT)
    assert len(away.seen) == 1
