"""GoCardless after a lost answer: the payment was created (status
`pending_submission`, its first status), the answer was lost, and the re-send meets 409
`idempotent_creation_conflict` naming it. The creation's outcome is what its first
answer would have been, a 201 with that resource: `succeeded`, with the resource
fetched (its status is the payment's own life, for the application to read), never
`indeterminate` until the payment is collected, nor `ReconcileRequired` once the key
is old. The store, `idemclient ops show`, `resume()` and a new process agree. One
payment in the ledger."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, State
from idemclient._time import CLOCK_SKEW
from idemclient.cli import main
from idemclient.profiles import named

BASE = "https://api.gocardless.test"
BODY = {"payments": {"amount": 1500, "currency": "GBP", "links": {"mandate": "MD1"}}}
HOLD = named("gocardless").in_flight_for + CLOCK_SKEW


class GoCardless:
    """GoCardless as its API behaves: a creation under a new key makes a payment in
    `pending_submission` (the ledger); the same key again is 409
    `idempotent_creation_conflict` naming it; GET /payments/{id} reads it. The answers
    to the first `lose` creations are lost after the payment is made."""

    def __init__(self, *, lose: int = 1) -> None:
        self.payments: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}
        self.lose = lose
        self.posts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)
        if request.method == "GET":
            payment = self.payments.get(request.url.path.rsplit("/", 1)[-1])
            if payment is None:
                return httpx.Response(404, json={"error": {"code": 404}})
            return httpx.Response(200, json={"payments": payment})
        self.posts += 1
        key = request.headers["idempotency-key"]
        if key in self.by_key:
            return httpx.Response(409, json=_conflict(self.by_key[key]))
        made = f"PM{len(self.payments) + 1:08d}"
        sent = json.loads(request.content)["payments"]
        self.payments[made] = {"id": made, "status": "pending_submission", **sent}
        self.by_key[key] = made
        if self.lose:
            self.lose -= 1
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return httpx.Response(201, json={"payments": self.payments[made]})


def _conflict(resource: str) -> dict[str, Any]:
    message = "A resource has already been created with this idempotency key"
    return {
        "error": {
            "type": "invalid_state",
            "code": 409,
            "message": message,
            "errors": [
                {
                    "reason": "idempotent_creation_conflict",
                    "message": message,
                    "links": {"conflicting_resource_id": resource},
                }
            ],
        }
    }


def _client(path: Path, clock: ManualClock, server: GoCardless) -> Client:
    return Client(
        store=path,
        clock=clock,
        transport=httpx.MockTransport(server),
        base_url=BASE,
        profile="gocardless",
        headers={"Authorization": "Bearer live_token"},
    )


def _lost_then_held(path: Path, clock: ManualClock, server: GoCardless) -> None:
    """The first creation's answer is lost: maybe applied, held (GoCardless runs a
    second request beside the first), then the hold runs out."""
    with _client(path, clock, server) as client:
        with pytest.raises(Indeterminate):
            client.post("/payments", json=BODY, operation_id="pay-1")
        with pytest.raises(Indeterminate, match="not sent again"):
            client.post("/payments", json=BODY, operation_id="pay-1")  # held: nothing sent
    assert server.posts == 1
    clock.advance(HOLD)


def _check_settled(path: Path, server: GoCardless) -> None:
    """The store, `ops show` and a new process agree: succeeded, the resource kept."""
    posts = server.posts
    with _client(path, ManualClock(), server) as later:
        stored = later.operation("pay-1")
        assert stored is not None
        assert (stored.state, stored.maybe_applied) == (State.SUCCEEDED, True)
        assert later.resume() == []  # nothing left unfinished
        again = later.post("/payments", json=BODY, operation_id="pay-1")
        assert (again.state, again.from_store) == (State.SUCCEEDED, True)
        assert again.json()["payments"]["id"] == "PM00000001"
    assert server.posts == posts  # answered from the store
    shown = CliRunner().invoke(main, ["ops", "show", "pay-1", "--store", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.output)
    assert document["state"] == "succeeded"
    assert json.loads(document["response"]["body"])["payments"]["id"] == "PM00000001"
    assert len(server.payments) == 1
    assert server.posts == 2  # the lost one, and the one that met the conflict


@pytest.mark.parametrize("how", ["again", "resume", "new process", "async"])
def test_a_creation_recovered_from_a_conflict_is_succeeded_with_the_resource(
    tmp_path: Path, how: str
) -> None:
    clock, server, path = ManualClock(), GoCardless(), tmp_path / "shop.db"
    _lost_then_held(path, clock, server)
    outcome: Any
    if how == "async":

        async def again() -> Any:
            async with AsyncClient(
                store=path,
                clock=clock,
                transport=httpx.MockTransport(server),
                base_url=BASE,
                profile="gocardless",
                headers={"Authorization": "Bearer live_token"},
            ) as client:
                return await client.post("/payments", json=BODY, operation_id="pay-1")

        outcome = asyncio.run(again())
    elif how == "resume":
        with _client(path, clock, server) as client:
            (outcome,) = client.resume()
    else:  # the same client's next call, or a new process's: a new client either way
        with _client(path, clock, server) as client:
            outcome = client.post("/payments", json=BODY, operation_id="pay-1")
    assert outcome.state is State.SUCCEEDED, outcome
    assert outcome.existing == "PM00000001"
    payment = outcome.json()["payments"]
    assert (payment["id"], payment["status"]) == ("PM00000001", "pending_submission")
    assert outcome.response.status_code == 200  # the resource, as fetched
    _check_settled(path, server)


@pytest.mark.parametrize(
    "status", ["failed", "cancelled", "customer_approval_denied", "charged_back"]
)
def test_a_payment_whose_life_went_on_is_still_a_creation_that_succeeded(
    tmp_path: Path, status: str
) -> None:
    # Collection failed days later, or the customer cancelled: the creation (the POST)
    # succeeded all the same; what became of the payment is in its status.
    clock, server, path = ManualClock(), GoCardless(), tmp_path / "shop.db"
    _lost_then_held(path, clock, server)
    server.payments["PM00000001"]["status"] = status
    with _client(path, clock, server) as client:
        outcome = client.post("/payments", json=BODY, operation_id="pay-1")
    assert outcome.state is State.SUCCEEDED
    assert outcome.json()["payments"]["status"] == status
    assert len(server.payments) == 1


def test_a_named_resource_that_cannot_be_read_stays_maybe_applied(tmp_path: Path) -> None:
    # The conflict names a payment the fetch does not find: nothing to give back as the
    # creation's answer. Maybe applied, never sent as new, never succeeded.
    clock, server, path = ManualClock(), GoCardless(), tmp_path / "shop.db"
    _lost_then_held(path, clock, server)
    server.payments.clear()
    with _client(path, clock, server) as client:
        with pytest.raises(Indeterminate, match="PM00000001"):
            client.post("/payments", json=BODY, operation_id="pay-1")
        record = client.store.get("pay-1")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)
    assert server.posts == 2


def test_two_processes_meeting_the_conflict_settle_it_once(tmp_path: Path) -> None:
    # Process A meets the conflict and fetches the payment; its fetch is slow. Process
    # B, on the same store, re-issues meanwhile: it meets the conflict too, fetches and
    # settles. A's fetch then comes back to a finished operation: both succeeded, the
    # same payment, one in the ledger.
    clock, server, path = ManualClock(), GoCardless(), tmp_path / "shop.db"
    _lost_then_held(path, clock, server)
    fetching, go_on = threading.Event(), threading.Event()
    answer = server.__call__

    def slow_first_fetch(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and not fetching.is_set():
            fetching.set()
            assert go_on.wait(10), "the test never let the first fetch go on"
        return answer(request)

    got: list[Any] = []

    def process_a() -> None:
        with Client(
            store=path,
            clock=clock,
            transport=httpx.MockTransport(slow_first_fetch),
            base_url=BASE,
            profile="gocardless",
            headers={"Authorization": "Bearer live_token"},
        ) as client:
            try:
                got.append(client.post("/payments", json=BODY, operation_id="pay-1"))
            except BaseException as exc:
                got.append(exc)

    a = threading.Thread(target=process_a)
    a.start()
    try:
        assert fetching.wait(10)
        with _client(path, clock, server) as b:
            by_b = b.post("/payments", json=BODY, operation_id="pay-1")
    finally:
        go_on.set()
        a.join(10)
    (by_a,) = got
    for outcome in (by_a, by_b):
        assert getattr(outcome, "state", None) is State.SUCCEEDED, outcome
        assert outcome.json()["payments"]["id"] == "PM00000001"
    assert len(server.payments) == 1
    assert server.posts == 3  # the lost one, and each process's conflict
