"""The receiver on real sockets on 127.0.0.1: ASGI under uvicorn, fed by the live
reference server's background delivery loop; WSGI under the stdlib's wsgiref server.

Reference server and inbox share one ManualClock, so signatures are judged on the same
time and retries come due only when the test moves it. What happens in the server's
threads is waited for with `wait_until` (bounded, 10 ms turns).
"""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import ManualClock
from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookReceiver
from idemclient.testing import ReferenceServer, SandboxClient, serve
from idemclient.testing._adapters.live import _read_ready_line, server_command
from idemclient.testing._machine.webhooks import retry_delay

from .conftest import (
    SECRET,
    SENDER,
    asgi_server,
    effects,
    record_effect,
    recorded_ids,
    signed,
    wait_until,
    wsgi_server,
)


def pay(base_url: str, count: int, *, transport: httpx.BaseTransport | None = None) -> None:
    with httpx.Client(base_url=base_url, transport=transport) as client:
        for n in range(count):
            response = client.post(
                "/v1/payments",
                json={"amount": 100 + n, "currency": "EUR", "reference": f"order-{n}"},
                headers={"Authorization": "Bearer shop", "Idempotency-Key": f"k-{n}"},
            )
            assert response.status_code == 201


@pytest.fixture
def receiver(inbox: SQLiteInbox) -> WebhookReceiver[sqlite3.Connection]:
    return WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect
    )


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as server:
        yield server


def test_asgi_receiver_under_uvicorn_fed_by_the_live_servers_delivery_loop(
    receiver: WebhookReceiver[sqlite3.Connection],
    server: ReferenceServer,
    clock: ManualClock,
    app_db: Path,
) -> None:
    with (
        asgi_server(receiver.asgi_app()) as url,
        serve(server, webhook_interval=0.02) as live,
    ):
        server.set_webhook_endpoint(url, secrets=[SECRET])
        server.webhook_fault("duplicate", times=2)
        server.webhook_fault("lose_ack")
        pay(live.url, 5)
        # The background loop delivers each event once (two of them twice over).
        assert wait_until(lambda: all(e.attempts >= 1 for e in server.webhook_events()), timeout=20)
        [lost] = [e for e in server.webhook_events() if e.state == "pending"]
        assert lost.last_status == 200  # the receiver acknowledged; the server "lost" it
        clock.advance(retry_delay(1))  # its retry is due: the loop sends it again
        assert wait_until(
            lambda: all(e.state == "delivered" for e in server.webhook_events()), timeout=20
        )
        events = server.webhook_events()
        # Refused over the socket too: a forgery, and what is not a POST.
        body = events[0].body.encode()
        forged = {**signed(body, "evt_forged", timestamp=clock.time())}
        forged["webhook-signature"] = forged["webhook-signature"][:-4] + "AAA="
        assert httpx.post(url, content=body, headers=forged).status_code == 401
        assert httpx.get(url).status_code == 405
    assert sum(e.posts for e in events) == 5 + 2 + 1
    assert effects(app_db) == {e.id: 1 for e in events}
    assert len(recorded_ids(app_db)) == 5


def test_asgi_receiver_refuses_an_oversized_body_over_the_socket(
    inbox: SQLiteInbox, clock: ManualClock, app_db: Path
) -> None:
    receiver = WebhookReceiver(
        inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect, max_body=100
    )
    body = b"x" * 5000
    with asgi_server(receiver.asgi_app()) as url:
        response = httpx.post(url, content=body, headers=signed(body, "evt_1", timestamp=0))
    assert response.status_code == 413
    assert recorded_ids(app_db) == set()


def test_wsgi_receiver_under_wsgiref_receives_over_a_socket(
    receiver: WebhookReceiver[sqlite3.Connection],
    server: ReferenceServer,
    clock: ManualClock,
    app_db: Path,
) -> None:
    with wsgi_server(receiver.wsgi_app()) as url:
        server.set_webhook_endpoint(url, secrets=[SECRET])
        server.webhook_fault("duplicate", times=3)
        server.webhook_fault("reorder")
        pay("http://psp.test", 4, transport=server.transport)
        report = server.deliver_webhooks()
        assert (report.delivered, report.posts) == (4, 7)
        stale = signed(b"{}", "evt_old", timestamp=clock.time() - 600)
        assert httpx.post(url, content=b"{}", headers=stale).json() == {
            "message_id": "evt_old",
            "reason": "stale",
            "status": "refused",
        }
    assert effects(app_db) == {e.id: 1 for e in server.webhook_events()}


def test_a_chunked_delivery_under_wsgiref_is_told_411_not_refused_as_forged(
    receiver: WebhookReceiver[sqlite3.Connection], clock: ManualClock, app_db: Path
) -> None:
    # wsgiref passes a chunked body through undecoded and does not say where it ends
    # (no wsgi.input_terminated): the receiver cannot read it, and says so with 411,
    # instead of reading it as empty and refusing it as forged on every redelivery.
    body = b'{"type": "payment.succeeded"}'
    headers = signed(body, "evt_1", timestamp=clock.time())

    def pieces() -> Iterator[bytes]:
        yield body[:10]
        yield body[10:]

    with wsgi_server(receiver.wsgi_app()) as url:
        chunked = httpx.post(url, content=pieces(), headers=headers)
        assert chunked.request.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in chunked.request.headers
        assert chunked.status_code == 411
        assert chunked.json()["status"] == "invalid"
        assert effects(app_db) == {}
        # The sender that sends a length is processed.
        assert httpx.post(url, content=body, headers=headers).json()["status"] == "processed"
    assert effects(app_db) == {"evt_1": 1}


def test_the_server_command_delivers_in_the_background_to_its_webhook_url(
    app_db: Path, tmp_path: Path
) -> None:
    """`idemclient server --webhook-url ... --webhook-secret ...` on the real clock."""
    from idemclient.clock import SystemClock

    with SQLiteInbox(app_db, clock=SystemClock()) as real_time_inbox:
        receiver = WebhookReceiver(
            real_time_inbox, sender=SENDER, scheme=StandardWebhooks([SECRET]), handler=record_effect
        )
        with wsgi_server(receiver.wsgi_app()) as url:
            argv = server_command(port=0, recovery_interval=0)
            argv += ["--webhook-url", url, "--webhook-secret", SECRET]
            argv += ["--webhook-interval", "0.02"]
            process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            try:
                psp = _read_ready_line(process, 20)
                pay(psp, 2)
                # Delivered by the child's background loop: wait, bounded, for both effects.
                assert wait_until(lambda: len(effects(app_db)) == 2, timeout=20)
                with SandboxClient(psp) as sandbox:
                    assert wait_until(
                        lambda: {e.state for e in sandbox.webhook_events()} == {"delivered"},
                        timeout=20,
                    )
            finally:
                process.terminate()
                _, err = process.communicate(timeout=20)
    assert "Traceback" not in err
    assert list(effects(app_db).values()) == [1, 1]
