"""The reference server's webhooks: queued with the resource, signed, retried until
acknowledged, and misdelivered on purpose when a test asks."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock
from idemclient.inbox import SignatureInvalid, StandardWebhooks
from idemclient.testing import (
    Phase,
    ReferenceServer,
    SandboxClient,
    WebhookEventRecord,
    WebhookReport,
    serve,
)
from idemclient.testing._machine.webhooks import MAX_RETRY_DELAY, event_for, retry_delay
from idemclient.testing._storage.sqlite import SCHEMA_VERSION, Storage

from .conftest import SECRET, wsgi_server

PAYMENT = {"amount": 1250, "currency": "EUR", "reference": "inv-1"}
MESSAGE_ID_HEADER = StandardWebhooks.ID_HEADER
SIGNATURE_HEADER = StandardWebhooks.SIGNATURE_HEADER


def verify_delivery(
    request: httpx.Request, secrets: list[str] | tuple[str, ...], now: float
) -> int:
    """The signed timestamp of a delivery, verified as a Standard Webhooks receiver does."""
    signed = StandardWebhooks(secrets).verify(
        request.headers, request.content, now=now, tolerance=300
    )
    assert signed.message_id == request.headers[MESSAGE_ID_HEADER]
    return signed.timestamp


@dataclass
class Recorder:
    """An in-process webhook endpoint that records every delivery and answers as told."""

    answers: list[int | Exception] = field(default_factory=list)
    received: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.received.append(request)
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer, json={})

    def ids(self) -> list[str]:
        return [r.headers[MESSAGE_ID_HEADER] for r in self.received]


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=ManualClock()) as server:
        yield server


@pytest.fixture
def recorder(server: ReferenceServer) -> Recorder:
    recorder = Recorder()
    server.set_webhook_endpoint(
        "https://merchant.test/webhooks",
        secrets=[SECRET],
        transport=httpx.MockTransport(recorder),
    )
    return recorder


def pay(
    server: ReferenceServer,
    key: str,
    *,
    path: str = "/v1/payments",
    token: str = "alice",
    reference: str = "inv-1",
) -> httpx.Response:
    with httpx.Client(transport=server.transport, base_url="http://psp.test") as client:
        return client.post(
            path,
            json={**PAYMENT, "reference": reference},
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        )


def only_event(server: ReferenceServer) -> WebhookEventRecord:
    [event] = server.webhook_events()
    return event


# -- the outbox ------------------------------------------------------------------------


def test_a_finished_payment_queues_exactly_one_event(server: ReferenceServer) -> None:
    created = pay(server, "k-1")
    assert created.status_code == 201
    assert pay(server, "k-1").headers["idempotent-replayed"] == "true"  # no second event
    event = only_event(server)
    assert (event.type, event.client, event.state) == ("payment.succeeded", "alice", "pending")
    assert event.resource_id == created.json()["id"]
    assert (event.attempts, event.posts, event.next_attempt_at) == (0, 0, server.now())
    body = json.loads(event.body)
    assert body == {
        "id": event.id,
        "object": "event",
        "type": "payment.succeeded",
        "created": int(server.now()),
        "sequence": 2,  # its place in the payment's life: created 1, final 2
        "data": {"object": created.json()},
    }


@pytest.mark.parametrize(
    ("path", "decline", "event_type"),
    [
        ("/v1/payments", False, "payment.succeeded"),
        ("/v1/payments", True, "payment.declined"),
        ("/v1/payouts", False, "payout.succeeded"),
        ("/v1/payouts", True, "payout.declined"),
    ],
)
def test_each_final_status_has_its_event_type(
    server: ReferenceServer, path: str, decline: bool, event_type: str
) -> None:
    if decline:
        server.external_fault(1, "decline")
    assert pay(server, "k-1", path=path).status_code == (402 if decline else 201)
    assert only_event(server).type == event_type


@pytest.mark.parametrize("after", [Phase.H1_DONE, Phase.EXT1_DONE, Phase.EXT2_DONE])
def test_no_event_before_the_resource_is_final_and_one_after_recovery(
    server: ReferenceServer, after: Phase
) -> None:
    server.crash(after)
    with pytest.raises(httpx.RemoteProtocolError):
        pay(server, "k-1")
    assert server.webhook_events() == ()  # crashed before Handler3: nothing to announce
    server.advance(server.lease + 1)
    assert server.recover().finished == 1
    assert only_event(server).type == "payment.succeeded"


def test_an_event_rolls_back_with_a_handler3_that_lost_its_lease(server: ReferenceServer) -> None:
    # The event insert shares Handler3's transaction, which is fenced by the lease owner:
    # an attempt that was taken over cannot announce a resource it did not finish.
    server.crash(Phase.EXT2_DONE)
    with pytest.raises(httpx.RemoteProtocolError):
        pay(server, "k-1")
    [entry] = server.ledger()
    resource = server._storage.resource(entry.resource_id)
    assert resource is not None
    event = event_for(resource, {"id": resource.id}, server.now())
    finished = server._storage.finish(
        client="alice",
        key="k-1",
        owner="not-the-lease-owner",
        now=server.now(),
        status="succeeded",
        response_code=201,
        response_body=b"{}",
        events=[event],
    )
    assert not finished
    assert server.webhook_events() == ()


# -- delivering ------------------------------------------------------------------------


def test_a_delivery_is_signed_as_the_inbox_verifies(
    server: ReferenceServer, recorder: Recorder
) -> None:
    pay(server, "k-1")
    report = server.deliver_webhooks()
    assert report == WebhookReport(
        due=1, delivered=1, failed=0, abandoned=0, postponed=0, waiting=0, posts=1
    )
    [request] = recorder.received
    event = only_event(server)
    assert request.method == "POST"
    assert request.url == "https://merchant.test/webhooks"
    assert request.headers[MESSAGE_ID_HEADER] == event.id
    assert request.headers["content-type"] == "application/json"
    assert request.content == event.body.encode()
    assert verify_delivery(request, [SECRET], server.now()) == int(server.now())
    assert (event.state, event.attempts, event.posts) == ("delivered", 1, 1)
    assert (event.delivered_at, event.last_status) == (server.now(), 200)
    assert server.deliver_webhooks().due == 0  # acknowledged: never sent again


def test_a_generated_secret_is_returned_and_used(server: ReferenceServer) -> None:
    recorder = Recorder()
    secrets = server.set_webhook_endpoint(
        "https://merchant.test/hook", transport=httpx.MockTransport(recorder)
    )
    assert len(secrets) == 1
    assert secrets[0].startswith("whsec_")
    pay(server, "k-1")
    server.deliver_webhooks()
    [request] = recorder.received
    with pytest.raises(SignatureInvalid):  # not signed with some other secret
        verify_delivery(request, [SECRET], server.now())
    verify_delivery(request, secrets, server.now())


def test_a_rotation_signs_with_every_secret(server: ReferenceServer) -> None:
    recorder = Recorder()
    new = StandardWebhooks.generate_secret()
    server.set_webhook_endpoint(
        "https://m.test/h", secrets=[SECRET, new], transport=httpx.MockTransport(recorder)
    )
    pay(server, "k-1")
    server.deliver_webhooks()
    [request] = recorder.received
    assert request.headers[SIGNATURE_HEADER].count("v1,") == 2
    for secret in (SECRET, new):  # a receiver holding either one accepts it
        verify_delivery(request, [secret], server.now())


@pytest.mark.parametrize(
    ("attempts", "delay"),
    [
        (1, 2.0),
        (2, 4.0),
        (3, 8.0),
        (11, 2048.0),
        (12, MAX_RETRY_DELAY),  # 4096 capped to an hour
        (10**9, MAX_RETRY_DELAY),  # never overflows
    ],
)
def test_the_retry_schedule_doubles_up_to_an_hour(attempts: int, delay: float) -> None:
    assert retry_delay(attempts) == delay


def test_the_retry_schedule_counts_from_one() -> None:
    with pytest.raises(ValueError, match="counts from 1"):
        retry_delay(0)


def test_unacknowledged_deliveries_are_retried_on_schedule_until_a_2xx(
    server: ReferenceServer, recorder: Recorder
) -> None:
    recorder.answers = [500, httpx.ConnectError("refused"), 404, 200]
    pay(server, "k-1")
    start = server.now()
    waited = 0.0
    for attempt in range(1, 4):
        report = server.deliver_webhooks()
        assert (report.due, report.failed) == (1, 1)
        event = only_event(server)
        assert (event.state, event.attempts) == ("pending", attempt)
        assert event.next_attempt_at == start + waited + retry_delay(attempt)
        # Not due a moment before its time ...
        server.advance(retry_delay(attempt) - 0.5)
        assert server.deliver_webhooks().due == 0
        # ... and due at it.
        server.advance(0.5)
        waited += retry_delay(attempt)
    assert server.deliver_webhooks().delivered == 1
    event = only_event(server)
    assert (event.state, event.attempts, event.last_status) == ("delivered", 4, 200)
    assert len(recorder.received) == 4
    assert len(set(recorder.ids())) == 1  # the same message id every time
    assert len({r.content for r in recorder.received}) == 1  # and the same bytes


def test_the_last_failure_is_kept_for_inspection(
    server: ReferenceServer, recorder: Recorder
) -> None:
    recorder.answers = [httpx.ConnectError("connection refused")]
    pay(server, "k-1")
    server.deliver_webhooks()
    event = only_event(server)
    assert event.last_status is None
    assert event.last_error == "ConnectError: connection refused"


def test_an_event_is_abandoned_after_the_last_attempt() -> None:
    recorder = Recorder(answers=[500] * 10)
    with ReferenceServer(webhook_max_attempts=3) as server:
        server.set_webhook_endpoint(
            "https://m.test/h", secrets=[SECRET], transport=httpx.MockTransport(recorder)
        )
        pay(server, "k-1")
        reports = []
        for _ in range(5):
            reports.append(server.deliver_webhooks())
            server.advance(MAX_RETRY_DELAY)
        assert [r.failed for r in reports] == [1, 1, 1, 0, 0]
        assert [r.abandoned for r in reports] == [0, 0, 1, 0, 0]
        assert (only_event(server).state, only_event(server).attempts) == ("abandoned", 3)
    assert len(recorder.received) == 3


def test_events_wait_for_an_endpoint(server: ReferenceServer) -> None:
    pay(server, "k-1")
    assert server.deliver_webhooks().waiting == 1
    assert only_event(server).attempts == 0
    recorder = Recorder()
    server.set_webhook_endpoint(
        "https://m.test/h", secrets=[SECRET], transport=httpx.MockTransport(recorder)
    )
    assert server.deliver_webhooks().delivered == 1
    server.set_webhook_endpoint(None)  # removed: new events wait again
    pay(server, "k-2", reference="inv-2")
    assert server.deliver_webhooks().waiting == 1


def test_each_client_may_have_its_own_endpoint(server: ReferenceServer) -> None:
    alices, everyone = Recorder(), Recorder()
    server.set_webhook_endpoint(
        "https://alice.test/h", secrets=[SECRET], client="alice",
        transport=httpx.MockTransport(alices),
    )  # fmt: skip
    server.set_webhook_endpoint(
        "https://all.test/h", secrets=[SECRET], transport=httpx.MockTransport(everyone)
    )
    pay(server, "k-1", token="alice")
    pay(server, "k-1", token="bob")
    assert server.deliver_webhooks().delivered == 2
    assert [json.loads(r.content)["data"]["object"]["id"] for r in alices.received] == [
        e.resource_id for e in server.webhook_events() if e.client == "alice"
    ]
    assert len(everyone.received) == 1
    assert everyone.received[0].url.host == "all.test"


@pytest.mark.parametrize(
    ("url", "secrets", "message"),
    [
        ("ftp://m.test/h", None, "http:// or https://"),
        ("https://m.test/h", ["too-short"], "whsec_"),
        ("https://m.test/h", ["whsec_c2hvcnQ="], "at least 16 bytes"),
        ("https://m.test/h", [], "at least one secret"),
    ],
)
def test_a_bad_endpoint_is_refused_when_configured(
    server: ReferenceServer, url: str, secrets: list[str] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        server.set_webhook_endpoint(url, secrets=secrets)


def test_a_claimed_event_is_not_sent_by_a_second_deliverer(server: ReferenceServer) -> None:
    pay(server, "k-1")
    storage = server._storage
    [row] = storage.due_events(now=server.now(), limit=10)
    assert storage.claim_event(row, until=server.now() + 60)
    assert not storage.claim_event(row, until=server.now() + 60)  # read before the claim
    assert storage.due_events(now=server.now(), limit=10) == []
    # If the claimer dies, the event is due again when the claim runs out.
    assert len(storage.due_events(now=server.now() + 60, limit=10)) == 1


# -- never in the payment's way ----------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_dead_endpoint_never_touches_the_payment_path(server: ReferenceServer) -> None:
    server.set_webhook_endpoint(f"http://127.0.0.1:{closed_port()}/h", secrets=[SECRET])
    for n in range(3):
        assert pay(server, f"k-{n}", reference=f"inv-{n}").status_code == 201
    report = server.deliver_webhooks()
    assert (report.due, report.failed) == (3, 3)
    assert all(e.last_error and "ConnectError" in e.last_error for e in server.webhook_events())
    assert pay(server, "k-9", reference="inv-9").status_code == 201
    assert [e.journal for e in server.ledger()] == [("H1", "H2", "H3")] * 4


def test_a_receiver_that_blows_up_in_process_is_a_failed_attempt(
    server: ReferenceServer, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    recorder.answers = [RuntimeError("the receiver's own bug")]
    pay(server, "k-1")
    pay(server, "k-2", reference="inv-2")
    report = server.deliver_webhooks()
    assert (report.failed, report.delivered) == (1, 1)  # the pass went on
    assert "the receiver's own bug" in caplog.text


# -- faults ----------------------------------------------------------------------------


def test_duplicate_sends_the_same_message_twice(
    server: ReferenceServer, recorder: Recorder
) -> None:
    server.webhook_fault("duplicate")
    pay(server, "k-1")
    pay(server, "k-2", reference="inv-2")
    assert server.deliver_webhooks().posts == 3
    first, second, third = recorder.received
    assert first.headers[MESSAGE_ID_HEADER] == second.headers[MESSAGE_ID_HEADER]
    assert first.content == second.content
    assert third.headers[MESSAGE_ID_HEADER] != first.headers[MESSAGE_ID_HEADER]
    assert [e.posts for e in server.webhook_events()] == [2, 1]
    assert server.pending_faults() == 0


def test_lose_ack_ignores_a_2xx_so_the_event_comes_again(
    server: ReferenceServer, recorder: Recorder
) -> None:
    server.webhook_fault("lose_ack")
    pay(server, "k-1")
    assert server.deliver_webhooks().failed == 1
    event = only_event(server)
    assert (event.state, event.last_status) == ("pending", 200)
    assert event.last_error == "injected: the acknowledgement was lost"
    server.advance(retry_delay(1))
    assert server.deliver_webhooks().delivered == 1
    assert len(recorder.received) == 2
    assert len(set(recorder.ids())) == 1


def test_delay_holds_an_event_back_so_later_ones_overtake_it(
    server: ReferenceServer, recorder: Recorder
) -> None:
    for n in range(3):
        pay(server, f"k-{n}", reference=f"inv-{n}")
    first = server.webhook_events()[0]
    server.webhook_fault("delay", seconds=30)
    report = server.deliver_webhooks()
    assert (report.postponed, report.delivered) == (1, 2)
    server.advance(29)
    assert server.deliver_webhooks().due == 0
    server.advance(1)
    assert server.deliver_webhooks().delivered == 1
    assert recorder.ids()[-1] == first.id  # created first, delivered last
    assert only_event_attempts(server) == [1, 1, 1]  # a delay is not a failed attempt


def only_event_attempts(server: ReferenceServer) -> list[int]:
    return [e.attempts for e in server.webhook_events()]


def test_reorder_shuffles_one_pass(server: ReferenceServer, recorder: Recorder) -> None:
    for n in range(8):
        pay(server, f"k-{n}", reference=f"inv-{n}")
    created = [e.id for e in server.webhook_events()]
    server.webhook_fault("reorder")
    assert server.deliver_webhooks().delivered == 8
    assert sorted(recorder.ids()) == sorted(created)
    assert recorder.ids() != created


def test_without_faults_events_go_out_in_the_order_they_happened(
    server: ReferenceServer, recorder: Recorder
) -> None:
    for n in range(5):
        pay(server, f"k-{n}", reference=f"inv-{n}")
    server.deliver_webhooks()
    assert recorder.ids() == [e.id for e in server.webhook_events()]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.webhook_fault("explode"), "explode"),
        (lambda s: s.webhook_fault("duplicate", times=0), "times"),
        (lambda s: s.webhook_fault("delay"), "positive number of seconds"),
    ],
)
def test_bad_fault_scripts_are_refused(
    server: ReferenceServer, call: Callable[[ReferenceServer], None], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        call(server)
    assert server.pending_faults() == 0


def test_reset_forgets_events_and_webhook_faults_but_keeps_the_endpoint(
    server: ReferenceServer, recorder: Recorder
) -> None:
    pay(server, "k-1")
    server.webhook_fault("duplicate", times=3)
    server.reset()
    assert server.webhook_events() == ()
    assert server.pending_faults() == 0
    pay(server, "k-1")
    assert server.deliver_webhooks().posts == 1  # endpoint kept, no duplicate left


# -- the same through /_sandbox/ on a live server -------------------------------------------


def test_the_sandbox_endpoints_drive_webhooks_over_http() -> None:
    received: list[str] = []

    def app(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
        received.append(str(environ["HTTP_WEBHOOK_ID"]))
        start_response("204 No Content", [])
        return [b""]

    with serve() as live, wsgi_server(app) as url, SandboxClient(live.url) as sandbox:  # type: ignore[arg-type]
        secrets = sandbox.set_webhook_endpoint(url, secrets=[SECRET])
        assert secrets == (SECRET,)
        sandbox.webhook_fault("duplicate")
        pay(live.server, "k-1")
        report = sandbox.deliver_webhooks()
        assert (report.delivered, report.posts) == (1, 2)
        [event] = sandbox.webhook_events()
        assert event == only_event(live.server)
        assert received == [event.id, event.id]
        assert sandbox.set_webhook_endpoint(url)[0].startswith("whsec_")
        for bad in (
            {"url": url, "colour": "blue"},
            {"url": url, "secrets": "not-a-list"},
        ):
            answer = httpx.post(f"{live.url}/_sandbox/webhooks/endpoint", json=bad)
            assert answer.status_code == 400
        answer = httpx.post(f"{live.url}/_sandbox/webhooks/faults", json={"mode": "nope"})
        assert answer.status_code == 400


def test_the_server_command_refuses_a_bad_webhook_url() -> None:
    from click.testing import CliRunner

    from idemclient.cli import main

    result = CliRunner().invoke(main, ["server", "--port", "0", "--webhook-url", "ftp://x/h"])
    assert result.exit_code == 1
    assert "http:// or https://" in result.output


def test_the_server_command_documents_its_webhook_options() -> None:
    from click.testing import CliRunner

    from idemclient.cli import main

    result = CliRunner().invoke(main, ["server", "--help"])
    for option in ("--webhook-url", "--webhook-secret", "--webhook-interval"):
        assert option in result.output


def test_a_version_1_database_gains_the_webhook_table(tmp_path: Path) -> None:
    path = tmp_path / "psp.sqlite3"
    Storage(path).close()
    with sqlite3.connect(path) as conn:  # as a server without webhooks left it
        conn.execute("DROP TABLE webhook_events")
        conn.execute("PRAGMA user_version = 1")
    with ReferenceServer(db=path) as server:
        pay(server, "k-1")
        assert only_event(server).type == "payment.succeeded"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2


def test_the_earlier_headers_are_still_sent_on_request(server: ReferenceServer) -> None:
    from idemclient.inbox import MESSAGE_ID_HEADER as LEGACY_ID
    from idemclient.inbox import SIGNATURE_HEADER as LEGACY_SIGNATURE
    from idemclient.inbox import verify_signature

    recorder = Recorder()
    raw = "an-old-raw-secret-0123456789"  # the earlier scheme's secrets are raw text
    server.set_webhook_endpoint(
        "https://m.test/h",
        secrets=[raw],
        scheme="idemclient-v1",
        transport=httpx.MockTransport(recorder),
    )
    pay(server, "k-1")
    server.deliver_webhooks()
    [request] = recorder.received
    assert "webhook-signature" not in request.headers
    assert verify_signature(
        request.headers[LEGACY_SIGNATURE],
        secrets=[raw],
        message_id=request.headers[LEGACY_ID],
        body=request.content,
        now=server.now(),
    ) == int(server.now())


def test_an_unknown_signature_scheme_is_refused(server: ReferenceServer) -> None:
    with pytest.raises(ValueError, match="standard-webhooks, idemclient-v1"):
        server.set_webhook_endpoint("https://m.test/h", scheme="hmac-of-my-own")
