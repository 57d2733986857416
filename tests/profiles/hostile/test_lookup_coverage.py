"""A profile's look-up finds one kind of resource: the reference profile's searched
``/v1/payments`` only. An operation on another resource (a payout) reconciled without
``lookup=`` read "no payment with that reference" as "never applied": settled
`not_sent`, and sent again, it paid twice. The look-up either covers the operation's
resource (derived from its path) or settles nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    ReconcileRequired,
    RetryPolicy,
    State,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.testing import ReferenceServer, serve

AUTH = {"Authorization": "Bearer alice"}
BODY = {"amount": 100, "currency": "EUR"}


@pytest.fixture(params=["in-process", "loopback"])
def where(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(stack: ExitStack, profile: str, where: str, tmp_path: Path) -> tuple[Client, Any]:
    clock = ManualClock()
    server = stack.enter_context(ReferenceServer(profile=profile, clock=clock))
    if where == "loopback":
        place: dict[str, Any] = {"base_url": stack.enter_context(serve(server)).url}
    else:
        place = {"base_url": "http://psp.test", "transport": server.transport}
    client = stack.enter_context(
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            headers=AUTH,
            profile=profile,
            policy=RetryPolicy(max_attempts=1),
            **place,
        )
    )
    return client, server


@pytest.fixture
def reference(where: str, tmp_path: Path) -> Iterator[tuple[Client, Any]]:
    with ExitStack() as stack:
        yield _client(stack, "reference", where, tmp_path)


def test_an_applied_payout_is_found_by_the_reference_profile_s_look_up(
    reference: tuple[Client, Any],
) -> None:
    client, server = reference
    server.drop(path="/v1/payouts")  # applied, the answer lost
    with pytest.raises(Indeterminate):
        client.post(
            "/v1/payouts", json={**BODY, "reference": "po-1"}, operation_id="op", reference="po-1"
        )
    outcome = client.reconcile("op")
    assert outcome.state is State.SUCCEEDED
    assert (
        client.post("/v1/payouts", json={**BODY, "reference": "po-1"}, operation_id="op").state
        is State.SUCCEEDED
    )
    assert [(e.kind, e.reference) for e in server.ledger()] == [("payout", "po-1")]


def test_a_payout_never_applied_is_not_sent_by_the_reference_profile_s_look_up(
    reference: tuple[Client, Any],
) -> None:
    client, server = reference
    server.answer(500, path="/v1/payouts")  # answered before anything ran
    client.post("/v1/payments", json={**BODY, "reference": "po-2"})  # a payment, same reference
    with pytest.raises(Indeterminate):
        client.post(
            "/v1/payouts", json={**BODY, "reference": "po-2"}, operation_id="op", reference="po-2"
        )
    # Once the server has had its time to finish the attempt (see test_early_look_up).
    client.settings.clock.advance(profiles.reference.in_flight_for + CLOCK_SKEW)  # type: ignore[attr-defined]
    assert client.reconcile("op").state is State.NOT_SENT  # the payment is not this payout
    assert [e.kind for e in server.ledger()] == ["payment"]


def test_a_look_up_that_does_not_cover_the_operation_settles_nothing(
    where: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        client, server = _client(stack, "stripe", where, tmp_path)
        server.drop(path="/v1/payouts")
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payouts",
                json={**BODY, "reference": "po-3"},
                operation_id="op",
                reference="po-3",
            )
        with pytest.raises(ReconcileRequired, match="lookup="):
            client.reconcile("op")
        record = client.store.get("op")
        assert record is not None
        assert record.state is State.INDETERMINATE
        assert record.maybe_applied
        # Told where to look, it settles.
        outcome = client.reconcile("op", lookup="/v1/payouts?reference={reference}")
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1


@pytest.mark.parametrize(
    ("profile", "path", "covered"),
    [
        ("reference", "/v1/payments", True),
        ("reference", "/v1/payouts", True),
        ("stripe", "/v1/payment_intents", True),
        ("stripe", "/base/v1/payment_intents", True),  # under a base URL's path
        ("stripe", "/v1/payouts", False),
        ("stripe", "/v1/refunds", False),
        ("stripe", "/v1/payment_intents/pi_1/capture", False),
    ],
)
def test_which_operations_a_profile_s_look_up_covers(
    profile: str, path: str, covered: bool
) -> None:
    lookup = profiles.named(profile).lookup
    assert lookup is not None
    assert lookup.covers_path(path) is covered


def test_a_path_look_up_is_the_operation_s_own_url() -> None:
    from types import SimpleNamespace

    from idemclient._reconcile import lookup_url

    record: Any = SimpleNamespace(
        url="https://psp.test/base/v1/payouts?x=1", key="k", reference="a b", operation_id="op"
    )
    url = lookup_url("{path}?reference={reference}", record)
    assert url == "https://psp.test/base/v1/payouts?reference=a%20b"
    with pytest.raises(ValueError, match="must start"):
        profiles.Lookup("/v1/search{path}?reference={reference}")
