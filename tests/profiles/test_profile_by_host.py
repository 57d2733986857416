"""A client that chose no profile speaks, at a known provider's API host, that
provider's profile (and says so once per host); a chosen profile always wins, but one
that contradicts a known host is refused before anything is recorded or sent, unless
`profile_by_host=False` says it is on purpose.

Each provider's server is the reference server speaking its dialect, reached at the
provider's real host name through an in-process transport (nothing leaves the process),
and the ledger is counted: the answer to the first attempt is lost, and the payment is
made once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
    profiles,
    resume,
    wrap,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch, BatchInvalid, submit
from idemclient.errors import OperationMismatch, ProfileMismatch
from idemclient.testing import ReferenceServer

from .server_speakers import AUTH, BODY, PATH

#: A provider's production or sandbox host (per-merchant ones with a merchant's prefix),
#: and the profile a client that chose none speaks there.
HOSTS = [
    ("api-m.paypal.com", "paypal"),
    ("api-m.sandbox.paypal.com", "paypal"),
    ("api.checkout.com", "checkout"),
    ("vkuhvk4v.api.checkout.com", "checkout"),  # a merchant's own base URL
    ("vkuhvk4v.api.sandbox.checkout.com", "checkout"),
    ("connect.squareup.com", "square"),
    ("connect.squareupsandbox.com", "square"),
    ("api.gocardless.com", "gocardless"),
    ("api-sandbox.gocardless.com", "gocardless"),
    ("api.mollie.com", "mollie"),
    ("api.razorpay.com", "razorpay"),
    ("api.wise.com", "wise"),
    ("api.sandbox.transferwise.tech", "wise"),
    ("checkout-test.adyen.com", "adyen"),
    ("1797a841fbb37ca7-AdyenDemo-checkout-live.adyenpayments.com", "adyen"),  # live prefix
    ("api.stripe.com", "stripe"),
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def _counting() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that answers 201 and keeps every request it was handed (but the
    client's time probe, a HEAD)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)
        seen.append(request)
        return httpx.Response(201, json={"id": "pay_1", "status": "succeeded"})

    return httpx.MockTransport(handle), seen


@pytest.mark.parametrize(("host", "name"), HOSTS)
def test_a_default_client_at_a_provider_s_host_speaks_its_profile_and_pays_once(
    host: str, name: str, clock: ManualClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ReferenceServer(profile=name, clock=clock)
    with (
        server,
        Client(
            store=tmp_path / "client.db",
            clock=clock,
            transport=server.transport,
            base_url=f"https://{host}",
            headers=AUTH,
        ) as client,
    ):
        server.drop(path=PATH[name])  # applied, and its answer lost
        with caplog.at_level(logging.INFO, logger="idemclient"):
            try:
                outcome = client.post(PATH[name], json=BODY, operation_id="order-1")
            except Indeterminate:
                # Its server does not refuse a second request while the first runs:
                # sent again only once the first has surely ended.
                clock.advance(profiles.named(name).in_flight_for + CLOCK_SKEW)
                (outcome,) = client.resume()
            client.post(PATH[name], json={**BODY, "reference": "inv-2"}, operation_id="order-2")
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 2  # inv-1 once (its answer lost), inv-2 once
        assert client.store.get("order-1").profile == name  # type: ignore[union-attr]
    told = [
        r for r in caplog.records if getattr(r, "idemclient.event", None) == "profile_from_host"
    ]
    assert len(told) == 1  # once per client and host
    assert getattr(told[0], "idemclient.profile") == name


def test_each_host_names_its_provider_and_no_other() -> None:
    from idemclient._hosts import provider_at

    for host, name in HOSTS:
        assert provider_at(host) is profiles.named(name), host
        assert provider_at(host.upper() + ".") is profiles.named(name), host  # FQDN
    for host in (
        "psp.test",
        "paypal.com",
        "api.paypal.com.evil.example",
        "api.checkout.com.evil.example",
        "checkout.com",
        "evilapi.checkout.com",  # not a prefix of its own label
        "-checkout-live.adyenpayments.com",
        "stripe.com",
        "localhost",
        "127.0.0.1",
    ):
        assert provider_at(host) is None, host


def test_absolute_urls_speak_their_own_host_s_profile(tmp_path: Path) -> None:
    transport, seen = _counting()
    with Client(store=tmp_path / "c.db", transport=transport, headers=AUTH) as client:
        client.post("https://api-m.paypal.com/v2/checkout/orders", json=BODY)
        client.post("https://api.checkout.com/payments", json=BODY)
        client.post("https://psp.test/v1/payments", json=BODY)
    assert [
        [name for name in ("PayPal-Request-Id", "Cko-Idempotency-Key", "Idempotency-Key")
         if name in request.headers]
        for request in seen
    ] == [["PayPal-Request-Id"], ["Cko-Idempotency-Key"], ["Idempotency-Key"]]  # fmt: skip


def test_a_wrapped_client_speaks_its_host_s_profile(clock: ManualClock, tmp_path: Path) -> None:
    server = ReferenceServer(profile="paypal", clock=clock)
    http = httpx.Client(
        base_url="https://api-m.paypal.com", transport=server.transport, headers=AUTH
    )
    with server, wrap(http, store=tmp_path / "w.db", clock=clock) as wrapped:
        server.drop(path=PATH["paypal"])
        with pytest.raises(Indeterminate):
            wrapped.post(PATH["paypal"], json=BODY)
        clock.advance(profiles.paypal.in_flight_for + CLOCK_SKEW)
        (outcome,) = resume(wrapped)
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1


@pytest.mark.parametrize(
    "chosen",
    [
        "stripe",
        "generic",  # the default, chosen by name
        profiles.stripe.replace(name="stripe-eu"),
        profiles.generic.replace(name="mine"),
    ],
)
def test_a_chosen_profile_that_contradicts_a_known_host_is_refused_before_anything(
    chosen: Any, tmp_path: Path
) -> None:
    transport, seen = _counting()
    with Client(
        store=tmp_path / "c.db",
        transport=transport,
        base_url="https://api-m.paypal.com",
        headers=AUTH,
        profile=chosen,
    ) as client:
        with pytest.raises(ProfileMismatch, match=r"api-m\.paypal\.com") as refused:
            client.post("/v2/checkout/orders", json=BODY, operation_id="order-1")
        assert "PayPal-Request-Id" in str(refused.value)
        assert "profile_by_host=False" in str(refused.value)
        assert (refused.value.known, refused.value.host) == ("paypal", "api-m.paypal.com")
        assert client.store.get("order-1") is None  # nothing recorded
        with pytest.raises(ProfileMismatch):
            client.http.post("https://api-m.sandbox.paypal.com/v2/checkout/orders", json=BODY)
        client.get("/v2/checkout/orders/ORDER-1")  # a read is no operation: it goes
        client.post("https://psp.test/v1/payments", json=BODY)  # a host nobody knows
    assert [(r.method, r.url.host) for r in seen] == [
        ("GET", "api-m.paypal.com"),
        ("POST", "psp.test"),
    ]


def test_a_chosen_profile_wins_at_its_own_host_and_at_any_other(tmp_path: Path) -> None:
    transport, seen = _counting()
    with Client(
        store=tmp_path / "c.db",
        transport=transport,
        headers=AUTH,
        profile=profiles.stripe.replace(name="stripe-eu", key_retention=3600.0),
    ) as client:
        client.post("https://api.stripe.com/v1/payment_intents", json=BODY)  # its own host
        client.post("https://stripe-proxy.internal/v1/payment_intents", json=BODY)
    assert len(seen) == 2
    with Client(
        store=tmp_path / "d.db",
        transport=transport,
        headers=AUTH,
        base_url="https://api-m.paypal.com",
        profile="paypal",
    ) as client:
        client.post("/v2/checkout/orders", json=BODY)
    assert "PayPal-Request-Id" in seen[-1].headers


def test_profile_by_host_false_allows_another_dialect_at_a_provider_s_name(
    tmp_path: Path,
) -> None:
    """A test double (or a proxy) listening at a provider's name that speaks the
    reference server's dialect: said on purpose, it is spoken as given."""
    transport, seen = _counting()
    with Client(
        store=tmp_path / "c.db",
        transport=transport,
        base_url="https://api-m.paypal.com",
        headers=AUTH,
        profile="reference",
        profile_by_host=False,
    ) as client:
        assert client.post("/v1/payments", json=BODY).state is State.SUCCEEDED
    with Client(
        store=tmp_path / "d.db",
        transport=transport,
        base_url="https://api-m.paypal.com",
        headers=AUTH,
        profile_by_host=False,
    ) as client:
        client.post("/v1/payments", json=BODY)  # no profile: the generic one, as before
    assert ["Idempotency-Key" in r.headers for r in seen] == [True, True]
    assert not any("PayPal-Request-Id" in r.headers for r in seen)


def test_an_operation_recorded_under_the_generic_profile_at_paypal_is_never_sent_on(
    clock: ManualClock, tmp_path: Path
) -> None:
    """As an earlier version recorded it: the default profile at PayPal's host, its key
    in a header PayPal does not read, its answer lost. Another send, under any profile,
    could be a second payment: it is refused, and settled by a look-up."""
    server = ReferenceServer(profile="paypal", clock=clock)
    store = tmp_path / "c.db"
    where: dict[str, Any] = {
        "store": store,
        "clock": clock,
        "transport": server.transport,
        "base_url": "https://api-m.paypal.com",
        "headers": AUTH,
    }
    with server:
        with Client(**where, profile_by_host=False, policy=RetryPolicy(max_attempts=1)) as old:
            server.drop(path=PATH["paypal"])
            with pytest.raises(Indeterminate):
                old.post(PATH["paypal"], json=BODY, operation_id="order-1", reference="inv-1")
        assert len(server.ledger()) == 1
        with Client(**where) as client:  # speaks paypal there now
            with pytest.raises(OperationMismatch, match="generic server profile"):
                client.post(PATH["paypal"], json=BODY, operation_id="order-1")
            (left,) = client.resume()
            assert left.state is State.INDETERMINATE
            assert "generic server profile" in left.evidence
        with Client(**where, profile="generic") as client:  # its own profile: refused here
            (left,) = client.resume()
            assert left.state is State.INDETERMINATE
            assert "api-m.paypal.com is an API host of the paypal" in left.evidence
            # A look-up is no send: the record's own profile settles it.
            settled = client.reconcile("order-1", lookup=PATH["paypal"] + "?reference={reference}")
        assert len(server.ledger()) == 1
    assert settled.state is State.SUCCEEDED


def test_resume_never_moves_an_operation_to_a_host_that_speaks_another_profile(
    clock: ManualClock, tmp_path: Path
) -> None:
    transport, seen = _counting()
    store = tmp_path / "c.db"
    with (
        Client(
            store=store,
            clock=clock,
            transport=httpx.MockTransport(lambda request: httpx.Response(503)),
            base_url="https://psp.test",
            headers=AUTH,
            policy=RetryPolicy(max_attempts=1),
        ) as client,
        pytest.raises(NotSent),
    ):
        client.post("/v2/checkout/orders", json=BODY, operation_id="order-1")
    with Client(store=store, clock=clock, transport=transport, headers=AUTH) as client:
        (left,) = client.resume(origin="https://api-m.paypal.com")
        assert "not resumed" in left.evidence
        assert "paypal" in left.evidence
        assert client.store.get("order-1").url.startswith("https://psp.test/")  # type: ignore[union-attr]
    assert seen == []


def test_a_sandbox_operation_moves_to_production_under_the_same_profile(
    clock: ManualClock, tmp_path: Path
) -> None:
    server = ReferenceServer(profile="paypal", clock=clock)
    store = tmp_path / "c.db"
    with server:
        with (
            Client(
                store=store,
                clock=clock,
                transport=httpx.MockTransport(lambda request: httpx.Response(503)),
                base_url="https://api-m.sandbox.paypal.com",
                headers=AUTH,
                policy=RetryPolicy(max_attempts=1),
            ) as client,
            pytest.raises(NotSent),
        ):
            client.post(PATH["paypal"], json=BODY, operation_id="order-1")
        with Client(store=store, clock=clock, transport=server.transport, headers=AUTH) as client:
            (outcome,) = client.resume(origin="https://api-m.paypal.com")
            assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1


def test_a_batch_through_a_default_client_speaks_its_host_s_profile(
    clock: ManualClock, tmp_path: Path
) -> None:
    server = ReferenceServer(profile="paypal", clock=clock)
    batch = Batch.from_records(
        [
            {"ref": "E1", "amount": 100, "currency": "EUR", "value_date": "2026-11-30"},
            {"ref": "E2", "amount": 200, "currency": "EUR", "value_date": "2026-11-30"},
        ],
    )
    with (
        server,
        Client(
            store=tmp_path / "b.db",
            clock=clock,
            transport=server.transport,
            base_url="https://api-m.paypal.com",
            headers=AUTH,
        ) as client,
    ):
        report = submit(batch, client, path=PATH["paypal"], lookup=None)
        assert [row.state for row in report.rows] == ["succeeded"] * 2
        assert {r.profile for r in client.store.find(references=["E1", "E2"])} == {"paypal"}
        assert len(server.ledger()) == 2
    with (
        Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=server.transport,
            base_url="https://api-m.paypal.com",
            headers=AUTH,
            profile="generic",
        ) as client,
        pytest.raises(ProfileMismatch),
    ):
        submit(batch, client, path=PATH["paypal"], lookup=None)


def test_rows_recorded_under_the_generic_profile_at_paypal_say_how_to_finish_them(
    clock: ManualClock, tmp_path: Path
) -> None:
    """A file paid through PayPal's host under the default profile before it chose the
    host's (an earlier version): run again, its rows are not sent on under paypal, and
    the refusal names what finishes them on purpose."""
    server = ReferenceServer(profile="paypal", clock=clock)
    batch = Batch.from_records(
        [{"ref": "E1", "amount": 100, "currency": "EUR", "value_date": "2026-11-30"}]
    )
    where: dict[str, Any] = {
        "store": tmp_path / "b.db",
        "clock": clock,
        "transport": server.transport,
        "base_url": "https://api-m.paypal.com",
        "headers": AUTH,
    }
    with server:
        with Client(**where, profile_by_host=False) as before:
            submit(batch, before, path=PATH["paypal"], lookup=None)
        with Client(**where) as client, pytest.raises(BatchInvalid) as refused:
            submit(batch, client, path=PATH["paypal"], lookup=None)
        assert "--profile generic --no-profile-by-host" in str(refused.value)
        assert len(server.ledger()) == 1


@pytest.fixture
def offline() -> dict[str, str]:
    """The environment of a command that must send nothing: any request it made would
    go to a proxy at a closed local port, never to a provider."""
    return dict(os.environ, HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")


def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "idemclient", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_the_batch_command_speaks_the_url_s_provider_and_refuses_a_contradiction(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    file = tmp_path / "payroll.csv"
    file.write_text("ref,account,amount,currency,value_date\nE1,a,100,EUR,2026-11-30\n")
    common = ["batch", "submit", str(file), "--token", "t", "--store", str(tmp_path / "b.db")]
    shown = _command(*common, "--url", "https://api-m.paypal.com", "--dry-run", env=offline)
    assert shown.returncode == 0, shown.stderr
    assert "server profile: paypal" in shown.stderr
    refused = _command(
        *common, "--url", "https://api-m.paypal.com", "--profile", "stripe", env=offline
    )
    assert refused.returncode == 2
    assert "--profile stripe: api-m.paypal.com is an API host of the paypal" in refused.stderr
    assert "--no-profile-by-host" in refused.stderr
    assert not (tmp_path / "b.db").exists()  # nothing recorded, nothing sent


def test_ops_resume_does_not_send_an_operation_its_host_s_provider_contradicts(
    clock: ManualClock, tmp_path: Path, offline: dict[str, str]
) -> None:
    store = tmp_path / "c.db"
    with (
        Client(
            store=store,
            transport=httpx.MockTransport(lambda request: httpx.Response(503)),
            base_url="https://api-m.paypal.com",
            headers=AUTH,
            profile_by_host=False,
            policy=RetryPolicy(max_attempts=1),
        ) as client,
        pytest.raises(NotSent),
    ):
        client.post(PATH["paypal"], json=BODY, operation_id="order-1")
    done = _command("ops", "resume", "--store", str(store), "--token", "t", env=offline)
    assert done.returncode == 3, done.stderr
    assert "not resumed" in done.stdout
    assert "api-m.paypal.com is an API host of the paypal" in done.stdout
    with Client(store=store) as client:
        assert client.store.get("order-1").attempts == 1  # type: ignore[union-attr]


def test_a_client_whose_base_url_is_set_again_speaks_the_new_host_s_profile(
    tmp_path: Path,
) -> None:
    # Where a request goes is worked out once per path and kept: a base URL set again on
    # the client's httpx side is a new place, and the path is joined to it anew (Square
    # takes its key in the body, Stripe in a header: the client puts it before sending).
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": "pay_1"})

    with Client(
        store=tmp_path / "s.db",
        base_url="https://connect.squareup.com",
        transport=httpx.MockTransport(answer),
    ) as client:
        client.post("/v2/payments", json=BODY, operation_id="first")
        client.http.base_url = httpx.URL("https://api.stripe.com")
        client.post("/v2/payments", json=BODY, operation_id="second")
    seen = [r for r in seen if r.method == "POST"]  # the server's time may be asked too
    assert [r.url.host for r in seen] == ["connect.squareup.com", "api.stripe.com"]
    assert "idempotency_key" in json.loads(seen[0].content)
    assert "idempotency_key" not in json.loads(seen[1].content)
    assert "idempotency-key" in seen[1].headers
