"""Conformance: the client in every profile against the reference server in the same
profile, in process and over a real loopback socket, with faults, asserting one effect
per operation in the server's ledger and the outcome each provider's semantics give.

Where a profile's server cannot give one effect by itself (it has no guard for a
request in flight), the client's promise is tested instead: it never retries after an
attempt that may have been applied, and a later `resume()` settles the operation with
its original key, still one effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from idemclient import (
    Client,
    Indeterminate,
    KeyConflict,
    ManualClock,
    ReconcileRequired,
    RetryPolicy,
    State,
)
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named
from idemclient.testing import ReferenceServer, serve

from .server_speakers import ALL, AUTH, PATH

#: the profiles whose server answers a second request with a running key (in progress)
GUARDED = {
    "reference",
    "generic",
    "ietf",
    "stripe",
    "adyen",
    "checkout",
    "mollie",
    "razorpay",
    "drf-idempotency-key",
}
#: what the client ends with when another caller reused its key for another body
OTHER_BODY: dict[str, object] = {
    "reference": KeyConflict,
    "generic": KeyConflict,
    "ietf": KeyConflict,
    "stripe": KeyConflict,
    "square": KeyConflict,
    "drf-idempotency-key": KeyConflict,
    # These answer with the first request's answer, or as an ordinary refusal: the
    # provider cannot say more (docs/profiles.md).
    "adyen": State.SUCCEEDED,
    "paypal": State.SUCCEEDED,
    "checkout": State.SUCCEEDED,
    "wise": State.SUCCEEDED,
    "gocardless": State.SUCCEEDED,
    "mollie": State.FAILED,
    "razorpay": State.FAILED,
    # Runs the other body again: a second payment the client cannot prevent.
    "django-idempotency-key": State.SUCCEEDED,
}
BODY = {"amount": 1250, "currency": "EUR"}


@dataclass
class Setup:
    name: str
    server: ReferenceServer
    clock: ManualClock
    make: Callable[..., Client]

    def effects(self, key: str) -> list[tuple[int, int]]:
        return [
            (entry.ext1_applied, entry.ext2_applied)
            for entry in self.server.ledger()
            if entry.idempotency_key == key
        ]


@pytest.fixture(params=["in-process", "loopback"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=ALL)
def setup(request: pytest.FixtureRequest, mode: str, tmp_path: Path) -> Iterator[Setup]:
    name = str(request.param)
    clock = ManualClock()
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer(profile=name, clock=clock))
        if mode == "loopback":
            running = stack.enter_context(serve(server))
            where: dict[str, Any] = {"base_url": running.url}
        else:
            where = {"base_url": "http://psp.test", "transport": server.transport}

        def make(store: str = "client.db", **options: Any) -> Client:
            client = Client(
                store=tmp_path / store,
                clock=clock,
                headers=AUTH,
                profile=name,
                **where,
                **options,
            )
            stack.callback(client.close)
            return client

        yield Setup(name, server, clock, make)


def _post(client: Client, name: str, **options: Any) -> Any:
    return client.post(
        PATH[name], json={**BODY, "reference": options.pop("ref", "inv-1")}, **options
    )


def test_a_new_operation_is_applied_once(setup: Setup) -> None:
    client = setup.make()
    outcome = _post(client, setup.name, operation_id="op-1")
    assert outcome.state is State.SUCCEEDED
    assert setup.effects(outcome.key) == [(1, 1)]
    again = _post(client, setup.name, operation_id="op-1")
    assert again.from_store
    assert again.key == outcome.key
    assert setup.effects(outcome.key) == [(1, 1)]


def test_throttled_with_retry_after_is_waited_for_and_applied_once(setup: Setup) -> None:
    setup.server.answer(503, retry_after=2, times=2, path=PATH[setup.name])
    outcome = _post(setup.make(), setup.name, operation_id="op-2")
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 3
    assert setup.effects(outcome.key) == [(1, 1)]


def test_apply_then_drop_ends_applied_once(setup: Setup) -> None:
    client = setup.make()
    setup.server.drop(path=PATH[setup.name])
    if setup.name in GUARDED:
        outcome = _post(client, setup.name, operation_id="op-3")
        assert outcome.state is State.SUCCEEDED
        assert outcome.attempts == 2
    else:
        with pytest.raises(Indeterminate, match="not known to refuse a second request"):
            _post(client, setup.name, operation_id="op-3")
        # Held while the first attempt may still run at the server.
        (held,) = client.resume()
        assert held.state is State.INDETERMINATE
        assert setup.effects(held.key) == [(1, 1)]
        setup.clock.advance(named(setup.name).in_flight_for + CLOCK_SKEW)
        (outcome,) = client.resume()
        if setup.name == "django-idempotency-key":
            # Its server keeps keys 300 s, less than the hold: never sent again, looked up.
            assert outcome.state is State.INDETERMINATE
        else:
            assert outcome.state is State.SUCCEEDED
        if setup.name == "gocardless":
            assert outcome.existing is not None  # no replay: the conflict names it
    assert setup.effects(outcome.key) == [(1, 1)]


def test_a_key_reused_for_another_body_is_what_the_provider_says(setup: Setup) -> None:
    first = _post(setup.make("a.db"), setup.name)
    other = setup.make("b.db")  # another store: nothing stops it locally
    expected = OTHER_BODY[setup.name]
    request = {"json": {**BODY, "amount": 9999, "reference": "inv-1"}}
    if setup.name in ("square", "wise"):
        field = "idempotency_key" if setup.name == "square" else "customerTransactionId"
        request["json"][field] = first.key
    else:
        request["key"] = first.key
    if isinstance(expected, type):
        with pytest.raises(expected):
            other.post(PATH[setup.name], **request)
    else:
        assert other.post(PATH[setup.name], **request).state is expected
    effects = setup.effects(first.key)
    if setup.name == "django-idempotency-key":
        assert len(effects) == 2  # its documented limit: a changed body runs again
    else:
        assert effects == [(1, 1)]


def test_past_the_retention_a_maybe_applied_operation_is_looked_up_not_resent(
    setup: Setup,
) -> None:
    client = setup.make(policy=RetryPolicy(max_attempts=1))
    setup.server.drop(path=PATH[setup.name])
    with pytest.raises(Indeterminate) as raised:
        _post(client, setup.name, operation_id="op-5")
    key = raised.value.outcome.key
    retention = client.settings.profile.resolve(
        "POST", PATH[setup.name], client.settings.policy.methods
    ).key_retention
    setup.clock.advance(retention + 1)
    setup.server.reap()
    with pytest.raises(ReconcileRequired):
        _post(client, setup.name, operation_id="op-5")
    (resumed,) = client.resume()
    assert resumed.state is State.INDETERMINATE
    assert setup.effects(key) == [(1, 1)]


@pytest.mark.parametrize("name", ["reference", "stripe"])
def test_reconcile_finds_it_through_the_profile_look_up(name: str, tmp_path: Path) -> None:
    clock = ManualClock()
    with ReferenceServer(profile=name, clock=clock) as server:
        client = Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="http://psp.test",
            headers=AUTH,
            profile=name,
            policy=RetryPolicy(max_attempts=1),
        )
        with client:
            server.drop(path=PATH[name])
            with pytest.raises(Indeterminate):
                client.post(
                    PATH[name],
                    json={**BODY, "reference": "inv-9", "metadata": {"reference": "inv-9"}},
                    operation_id="op-6",
                    reference="inv-9",
                )
            outcome = client.reconcile("op-6")
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1


# -- a client in one profile against a server of another -----------------------------------


def _cross(
    client_profile: str, server_profile: str, tmp_path: Path
) -> tuple[Client, ReferenceServer]:
    clock = ManualClock()
    server = ReferenceServer(profile=server_profile, clock=clock)
    client = Client(
        store=tmp_path / "x.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers=AUTH,
        profile=client_profile,
    )
    return client, server


@pytest.mark.parametrize(
    ("client_profile", "server_profile"),
    [
        ("generic", "razorpay"),  # requires X-Payout-Idempotency on payouts
        ("generic", "square"),  # requires the key in the body
        ("stripe", "wise"),  # requires customerTransactionId in the body
        ("square", "wise"),  # the key in another body field
    ],
)
def test_a_server_that_finds_no_key_where_it_reads_it_refuses_and_nothing_is_paid(
    client_profile: str, server_profile: str, tmp_path: Path
) -> None:
    client, server = _cross(client_profile, server_profile, tmp_path)
    with client, server:
        outcome = client.post(PATH[server_profile], json={**BODY, "reference": "x"})
        assert outcome.state is State.FAILED
        assert outcome.status_code == 400
        assert server.ledger() == ()


def test_a_server_that_reads_no_key_at_all_pays_each_retry_which_is_why_the_profile_matters(
    tmp_path: Path,
) -> None:
    """The limit docs/profiles.md states: a PayPal-like server takes a request without
    its PayPal-Request-Id as an ordinary request. Under the right profile, one effect."""
    client, server = _cross("generic", "paypal", tmp_path)
    with client, server:
        server.drop(path=PATH["paypal"])
        client.post(PATH["paypal"], json={**BODY, "reference": "y"})
        assert len(server.ledger()) == 2  # the wrong profile: no key was read
    (tmp_path / "right").mkdir()
    client, server = _cross("paypal", "paypal", tmp_path / "right")
    with client, server:
        server.drop(path=PATH["paypal"])
        with pytest.raises(Indeterminate):
            client.post(PATH["paypal"], json={**BODY, "reference": "y"})
        server.clock.advance(named("paypal").in_flight_for + CLOCK_SKEW)  # the first surely ended
        (outcome,) = client.resume()
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1
