"""Attacks on django-idempotency-key's 409 (a replay, or the application's own
conflict): histories where the client reads a 409 as a refusal, or as the stored
success, though the key may have been sent by another process."""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    ManualClock,
    NotSent,
    ReconcileRequired,
    State,
    key_from_identity,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch, submit
from idemclient.profiles import Match, named
from idemclient.testing import ReferenceServer

from ...support.shop import shop_client
from ..scripted import Scripted

CONFLICT = {"detail": "an order with this number exists"}
# Asked to wait past the call's patience: nothing reached the server, not_sent.
BUSY = httpx.Response(429, headers={"Retry-After": "3600"})


def test_a_callers_key_continued_by_operation_id_alone_is_still_one_others_may_know(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    # The operation was recorded with the caller's key (an order number others may
    # send under too); issued again by its operation id alone, it is sent under that
    # same key. A 409 to it, with no attempt of ours before that may have been applied,
    # is another sender's payment replayed or the application's refusal: never
    # `failed` (the caller would pay again under another key).
    server = Scripted(BUSY, httpx.Response(409, json={"id": "ord_paid_elsewhere"}))
    client = make(server, "django-idempotency-key")
    with pytest.raises(NotSent):
        client.post("/orders", json={"number": 1}, key="order-1", operation_id="o-1")
    clock.advance(3600)
    with pytest.raises(ReconcileRequired) as raised:
        client.post("/orders", json={"number": 1}, operation_id="o-1")
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied) == (State.INDETERMINATE, True)
    assert [r.headers["idempotency-key"] for r in server.posts] == ["order-1", "order-1"]


@pytest.mark.anyio
async def test_a_callers_key_continued_by_operation_id_alone_async(
    store_path: Path, clock: ManualClock
) -> None:
    server = Scripted(BUSY, httpx.Response(409, json={"id": "ord_paid_elsewhere"}))
    async with AsyncClient(
        store=store_path,
        clock=clock,
        transport=httpx.MockTransport(server),
        base_url="https://api.psp.test",
        profile="django-idempotency-key",
    ) as client:
        with pytest.raises(NotSent):
            await client.post("/orders", json={"number": 2}, key="order-2", operation_id="o-2")
        clock.advance(3600)
        with pytest.raises(ReconcileRequired):
            await client.post("/orders", json={"number": 2}, operation_id="o-2")
    assert len(server.posts) == 2


def test_a_client_made_key_continued_by_operation_id_is_doubted_too(
    make: Callable[..., Client], clock: ManualClock
) -> None:
    # The store does not keep whose key it was: a key this client made, continued by
    # its operation id, is taken as one others may know (maybe applied, never failed).
    server = Scripted(BUSY, httpx.Response(409, json=CONFLICT))
    client = make(server, "django-idempotency-key")
    with pytest.raises(NotSent):
        client.post("/orders", json={"number": 3}, operation_id="o-3")
    clock.advance(3600)
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 3}, operation_id="o-3")
    # A fresh call of its own is still the application's refusal.
    fresh = Scripted(httpx.Response(409, json=CONFLICT))
    assert make(fresh, "django-idempotency-key").post("/x", json={}).state is State.FAILED


def test_a_batch_row_with_an_unexplained_409_is_reported_for_what_it_is(
    clock: ManualClock, tmp_path: Path
) -> None:
    # Another machine paid the row (the same reference, so the same key) seconds ago;
    # this store does not know it. The server replays it with a 409, which could also
    # be the application's refusal: unsettled, and the report says why.
    name = "django-idempotency-key"
    with ReferenceServer(clock=clock, profile=name) as server:
        for store in ("elsewhere.db", "here.db"):
            with shop_client(
                server, clock, tmp_path / store, profile=name, max_attempts=1
            ) as client:
                report = submit(_one_row(), client, lookup=None)
            clock.advance(10.0)
        [row] = report.rows
        assert len(server.ledger()) == 1
    assert row.state == "indeterminate"
    assert "longer ago than the server keeps keys" not in row.reason
    assert "another process" in row.reason
    assert "idemclient ops reconcile batch/payout/E0000" in row.reason


def _one_row() -> Batch:
    return Batch.from_records(
        [{"ref": "E0000", "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}]
    )


# A deployment whose replay says so (a header the application's own 409 never has).
MARKED = named("django-idempotency-key").replace(
    name="django-marked",
    replay=Match(frozenset({409}), header=("Idempotent-Replayed", "true")),
)


# The same, said with the profile's replay marker instead.
MARKER = named("django-idempotency-key").replace(
    name="django-marker", replay_marker=("Idempotent-Replayed", "true")
)


@pytest.mark.parametrize("profile", [MARKED, MARKER], ids=["match", "marker"])
def test_a_replay_marked_as_one_is_the_stored_success_to_a_callers_key(
    make: Callable[..., Client], profile: object
) -> None:
    marked = httpx.Response(409, json={"id": "ord_5"}, headers={"Idempotent-Replayed": "true"})
    server = Scripted(marked)
    client = make(server, profile)
    outcome = client.post("/orders", json={"number": 5}, key="order-5")
    assert (outcome.state, outcome.replayed) == (State.SUCCEEDED, True)
    assert outcome.json() == {"id": "ord_5"}


def test_an_unmarked_409_under_a_marked_replay_profile_is_the_applications_own(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.Response(409, json=CONFLICT))
    client = make(server, MARKED)
    outcome = client.post("/orders", json={"number": 6}, key="order-6")
    assert outcome.state is State.FAILED


def test_an_unmarked_409_under_a_marker_profile_is_still_doubted(
    make: Callable[..., Client],
) -> None:
    # The marker is read where it is, never required: a bare 409 stays either.
    server = Scripted(httpx.Response(409, json=CONFLICT))
    client = make(server, MARKER)
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 7}, key="order-7")


def test_a_batch_row_the_application_refuses_with_409_settles_after_a_look_up(
    clock: ManualClock, tmp_path: Path
) -> None:
    name = "django-idempotency-key"
    with ReferenceServer(clock=clock, profile=name) as server:
        # The application's own conflict, every time: nothing is ever paid.
        server.answer(409, times=100, key=key_from_identity("E0000", "payout"))
        with shop_client(server, clock, tmp_path / "s.db", profile=name, max_attempts=1) as client:
            reports = []
            for _ in range(4):
                reports.append(submit(_one_row(), client))
                # Past the server's in_flight_for and the skew: the look-up's "none" counts.
                clock.advance(profiles.BUILTIN[name].in_flight_for + CLOCK_SKEW + 1.0)
            record = client.store.get("batch/payout/E0000")
        assert server.ledger() == ()
    assert record is not None
    rows = [report.rows[0] for report in reports]
    assert [row.state for row in rows] == ["indeterminate", "failed", "failed", "failed"]
    assert [report.exit_code for report in reports] == [3, 4, 4, 4]
    # Settled by the second run's look-up, not sent again: one attempt, ever.
    assert (record.state, record.attempts, record.maybe_applied) == (State.FAILED, 1, False)
    assert (rows[1].http_status, rows[1].attempts, rows[1].resource_id) == (409, 1, None)
    assert "refused by the server, never applied: not sent again" in rows[1].reason
    assert "a look-up found no payment" in rows[1].reason
    assert rows[2].reason.startswith("refused in an earlier run (HTTP 409 refused by")


def test_a_batch_row_refused_with_409_is_not_settled_by_a_look_up_too_early(
    clock: ManualClock, tmp_path: Path
) -> None:
    # Looked up inside the in-flight window, "none" is not "never applied": the row is
    # never failed then (nor sent again), whatever the 409 was.
    name = "django-idempotency-key"
    with ReferenceServer(clock=clock, profile=name) as server:
        server.answer(409, times=100, key=key_from_identity("E0001", "payout"))
        with shop_client(server, clock, tmp_path / "s.db", profile=name, max_attempts=1) as client:
            batch = Batch.from_records(
                [{"ref": "E0001", "amount": 100, "currency": "GBP", "value_date": "2026-11-30"}]
            )
            first = submit(batch, client)
            clock.advance(profiles.BUILTIN[name].in_flight_for)  # not the skew yet
            second = submit(batch, client)
            record = client.store.get("batch/payout/E0001")
    assert [first.rows[0].state, second.rows[0].state] == ["indeterminate", "indeterminate"]
    assert "may still be running" in second.rows[0].reason
    assert second.exit_code == 3
    assert record is not None
    assert (record.state, record.attempts, record.maybe_applied) == (State.INDETERMINATE, 1, True)


class Challenged(httpx.Auth):
    """Sends, and on a 401 sends the same request again with fresh credentials (a
    token refreshed on its refusal)."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = "Bearer refreshed"
            yield request


def test_a_409_after_a_401_to_a_key_of_the_clients_own_is_a_refusal(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.Response(401), httpx.Response(409, json=CONFLICT))
    client = make(server, "django-idempotency-key", auth=Challenged())
    outcome = client.post("/orders", json={"number": 12})
    assert (outcome.state, outcome.maybe_applied) == (State.FAILED, False)
    assert len(server.posts) == 2


def test_a_409_after_a_401_to_a_callers_key_is_still_doubted(
    make: Callable[..., Client],
) -> None:
    server = Scripted(httpx.Response(401), httpx.Response(409, json=CONFLICT))
    client = make(server, "django-idempotency-key", auth=Challenged())
    with pytest.raises(ReconcileRequired):
        client.post("/orders", json={"number": 13}, key="order-13")
    assert len(server.posts) == 2
