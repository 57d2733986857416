"""django-idempotency-key: a 409 to a caller's key that no attempt of ours explains is
maybe applied (another sender's payment replayed, or the application's own refusal).
A look-up by reference that finds nothing, once nothing can still be running, says it
was the refusal: `Client.reconcile` and `idemclient ops reconcile` settle it `failed`
with the 409 as its answer, on either store, and it is never sent again. A look-up
that finds the payment, one asked too early, or one by key, never makes it failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    ReconcileRequired,
    State,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.cli import main
from idemclient.clock import set_testing
from idemclient.testing import ReferenceServer, serve

from ..support.shop import BY_REFERENCE, shop_client

DJANGO = "django-idempotency-key"
#: past the server's in_flight_for and the clocks' skew: a look-up's "none" counts
WINDOW = profiles.BUILTIN[DJANGO].in_flight_for + CLOCK_SKEW + 1.0
ORDER = {"amount": 100, "currency": "EUR", "reference": "ord-1"}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "shop.db")
    return str(request.getfixturevalue("pg_url"))


def _refused_once(server: ReferenceServer, client: Client, key: str = "order-1") -> None:
    """The application refuses the order with its own 409 (nothing paid): unsettled."""
    server.answer(409, times=100, key=key)
    with pytest.raises(ReconcileRequired):
        client.post("/v1/payments", json=ORDER, key=key, operation_id="o-1", reference="ord-1")


def test_client_reconcile_settles_the_applications_own_409_failed(target: str) -> None:
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=DJANGO) as server:
        with shop_client(server, clock, target, profile=DJANGO, max_attempts=1) as client:
            _refused_once(server, client)
            kept = client.store.get("o-1")
            assert kept is not None
            assert kept.response is not None  # the 409 is kept with the unsettled row
            # Too early: the server may still run a request it admitted; unsettled, and
            # the 409 is still kept.
            with pytest.raises(Indeterminate, match="not found"):
                client.reconcile("o-1", lookup=BY_REFERENCE)
            early = client.store.get("o-1")
            assert early is not None
            assert (early.state, early.finished_at) == (State.INDETERMINATE, None)
            assert early.response is not None
            clock.advance(WINDOW)
            outcome = client.reconcile("o-1", lookup=BY_REFERENCE)
            assert (outcome.state, outcome.maybe_applied) == (State.FAILED, False)
            assert outcome.response is not None
            assert outcome.response.status_code == 409
            assert "refused by the application, not a replay" in outcome.evidence
            record = client.store.get("o-1")
            assert record is not None
            assert record.finished_at is not None
            assert record.response is not None
            assert record.response.status_code == 409
            # Issued again, it is the stored refusal: never sent again.
            again = client.post(
                "/v1/payments", json=ORDER, key="order-1", operation_id="o-1", reference="ord-1"
            )
            assert (again.state, again.from_store, again.attempts) == (State.FAILED, True, 1)
            assert again.status_code == 409
            assert client.reconcile("o-1", lookup=BY_REFERENCE).state is State.FAILED
        assert server.ledger() == ()


def test_a_payment_another_sender_made_under_the_key_is_found_succeeded(
    target: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=DJANGO) as server:
        with shop_client(server, clock, tmp_path / "elsewhere.db", profile=DJANGO) as other:
            paid = other.post("/v1/payments", json=ORDER, key="order-1", reference="ord-1")
            assert paid.state is State.SUCCEEDED
        with shop_client(server, clock, target, profile=DJANGO, max_attempts=1) as client:
            with pytest.raises(ReconcileRequired):  # the replay, 409, unexplained here
                client.post(
                    "/v1/payments", json=ORDER, key="order-1", operation_id="o-1", reference="ord-1"
                )
            clock.advance(WINDOW)
            outcome = client.reconcile("o-1", lookup=BY_REFERENCE)
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1


def test_a_look_up_by_key_never_settles_it_failed(target: str) -> None:
    # The server forgets keys (300 s here, less than a "none" takes to count): a look-up
    # by key finds nothing of a payment made under a forgotten key. Not failed.
    clock = ManualClock()
    with ReferenceServer(clock=clock, profile=DJANGO) as server:
        with shop_client(server, clock, target, profile=DJANGO, max_attempts=1) as client:
            _refused_once(server, client)
            clock.advance(WINDOW)
            outcome = client.reconcile("o-1", lookup="/v1/payments?idempotency_key={key}")
        assert outcome.state is State.NOT_SENT


@pytest.fixture
def no_real_sleeps() -> Iterator[None]:
    """The command builds its client on the system clock: make it not sleep."""
    set_testing(True)
    yield
    set_testing(False)


@pytest.mark.usefixtures("no_real_sleeps")
def test_ops_reconcile_settles_it_failed_and_ops_show_says_why(target: str) -> None:
    with serve(ReferenceServer(profile=DJANGO)) as live:
        # Refused 21 minutes ago (the command reads the system clock).
        with Client(
            store=target,
            clock=ManualClock(start=time.time() - WINDOW),
            base_url=live.url,
            headers={"Authorization": "Bearer shop-1"},
            profile=DJANGO,
        ) as client:
            _refused_once(live.server, client)
        runner = CliRunner()
        common = ["--store", target, "--url", live.url, "--token", "shop-1"]
        done = runner.invoke(
            main,
            ["ops", "reconcile", "o-1", *common, "--lookup", "/v1/payments?reference={reference}"],
        )
        assert done.exit_code == 0, done.output
        assert done.stdout.split()[:2] == ["o-1", "failed"]
        assert "refused by the application" in done.stdout
        shown = runner.invoke(main, ["ops", "show", "--store", target, "o-1"])
        assert shown.exit_code == 0, shown.output
        assert "failed" in shown.stdout
        assert "status: 409" in shown.stdout
        assert "a look-up found no payment, so it was the refusal" in shown.stdout
        assert live.server.ledger() == ()
    with Client(store=target, profile=DJANGO) as reopened:
        record = reopened.store.get("o-1")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.FAILED, False)
