"""A payment taken over from a sender whose lease lapsed unreleased, under a profile whose
server runs a second request beside one still in flight under its key
(`guards_in_flight=False`): nothing is sent while that sender's attempt may still run.

When the sender was a process of this host that has exited, nobody will ever record
its answer: the call stops at once, maybe applied, held from that sender's last send,
and a resume after the hold sends it once. A sender of another host may be alive, only
paused: the call waits on the store for its answer, the whole deadline, as before.

The sender is a real process, killed (SIGKILL) once the server applied its payment
(`killed_sender.py`); the server keeps its ledger in a file, so it outlives it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, ReconcileRequired, RetryPolicy, State
from idemclient._time import CLOCK_SKEW
from idemclient.profiles import named
from idemclient.testing import ReferenceServer

from .killed_sender import AUTH, BODY

ROOT = Path(__file__).parents[3]
NOW = 1_800_000_000.0
PATHS = {
    "paypal": "/v2/checkout/orders",
    "square": "/v2/payments",
    "wise": "/v1/transfers",
    "gocardless": "/v1/payments",
    "django-idempotency-key": "/v1/payments",
}


@dataclass
class Posts(httpx.BaseTransport):
    """The server's transport, counting the payments sent (a time probe is a HEAD, a
    GoCardless fetch a GET: neither pays)."""

    inner: httpx.BaseTransport
    sent: list[str] = field(default_factory=list)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.sent.append(request.url.path)
        return self.inner.handle_request(request)


@dataclass
class Scene:
    client: Client
    clock: ManualClock
    server: ReferenceServer
    posts: Posts


@contextmanager
def after_a_killed_sender(tmp_path: Path, profile: str, *, host: str) -> Iterator[Scene]:
    """The store and the server after a sender (of this host, `-`, or of `host`) was
    killed once its payment was applied; a client of another process on both, its
    clock where the sender's stopped."""
    store, server_db = tmp_path / "ops.db", tmp_path / "psp.sqlite3"
    argv = [sys.executable, "-m", "tests.profiles.hostile.killed_sender"]
    argv += [str(store), str(server_db), profile, PATHS[profile], str(NOW), host]
    child = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    clock = ManualClock(NOW)
    with ReferenceServer(profile=profile, clock=clock, db=str(server_db)) as server:
        posts = Posts(server.transport)
        with Client(
            store=store,
            clock=clock,
            headers=AUTH,
            profile=profile,
            base_url="http://psp.test",
            transport=posts,
        ) as client:
            (entry,) = server.ledger()  # the killed sender's payment was applied
            assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
            record = client.store.get("op")
            assert record is not None
            assert record.state is State.IN_FLIGHT  # its lease left behind
            yield Scene(client, clock, server, posts)


def _sent_once_after_the_hold(scene: Scene, profile: str) -> None:
    """A resume once the hold is over: the payment is sent once more under its key, and
    the server pays nothing new; a server that forgets keys sooner than the hold ends
    (django-idempotency-key's 300 s) is not sent to: it is for a look-up."""
    (resumed,) = scene.client.resume()
    if named(profile).key_retention < named(profile).in_flight_for + CLOCK_SKEW:
        assert resumed.state is State.INDETERMINATE
        assert scene.posts.sent == []
        with pytest.raises(ReconcileRequired):
            scene.client.post(PATHS[profile], json=BODY, operation_id="op")
    else:
        assert resumed.state is State.SUCCEEDED
        assert len(scene.posts.sent) == 1
    (entry,) = scene.server.ledger()  # one payment, whatever was sent
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)


@pytest.mark.parametrize("profile", list(PATHS))
def test_a_payment_whose_sender_process_exited_stops_at_once_then_is_sent_once(
    tmp_path: Path, profile: str
) -> None:
    hold = named(profile).in_flight_for + CLOCK_SKEW
    with after_a_killed_sender(tmp_path, profile, host="-") as scene:
        scene.clock.advance(1.0)
        taken_at = scene.clock.time()
        (held,) = scene.client.resume()
        # No poll of the store, nothing sent: nobody will record that attempt's answer.
        assert (scene.clock.sleeps, scene.clock.time()) == ([], taken_at)
        assert scene.posts.sent == []
        assert (held.state, held.maybe_applied) == (State.INDETERMINATE, True)
        assert "has exited" in held.evidence
        # Held from the takeover, when the sender was found dead (it sent nothing after
        # that): the server's whole in-flight time for that attempt, and the hosts' skew.
        assert held.not_before == taken_at + hold
        scene.clock.advance(hold / 2)
        (still,) = scene.client.resume()
        assert still.state is State.INDETERMINATE
        assert scene.posts.sent == []
        scene.clock.advance(hold / 2)
        _sent_once_after_the_hold(scene, profile)


@pytest.mark.parametrize("profile", list(PATHS))
def test_a_payment_whose_sender_process_exited_stops_at_once_when_issued_again(
    tmp_path: Path, profile: str
) -> None:
    with after_a_killed_sender(tmp_path, profile, host="-") as scene:
        scene.clock.advance(1.0)
        with pytest.raises(Indeterminate, match="has exited without releasing it") as raised:
            scene.client.post(PATHS[profile], json=BODY, operation_id="op")
        assert raised.value.outcome.maybe_applied
        assert f"may be sent again in {named(profile).in_flight_for + CLOCK_SKEW:.0f}s" in str(
            raised.value
        )
        assert scene.clock.sleeps == []
        assert scene.posts.sent == []


@pytest.mark.parametrize("profile", list(PATHS))
def test_a_payment_whose_sender_is_of_another_host_waits_for_its_answer_as_before(
    tmp_path: Path, profile: str
) -> None:
    deadline = RetryPolicy().deadline
    hold = named(profile).in_flight_for + CLOCK_SKEW
    with after_a_killed_sender(tmp_path, profile, host="elsewhere") as scene:
        lapsed = scene.client.store.get("op")
        assert lapsed is not None
        assert lapsed.lease_expires is not None
        # Its death cannot be seen from here: its lease is respected until it lapses.
        scene.clock.advance(lapsed.lease_expires - scene.clock.time() + 1.0)
        (held,) = scene.client.resume()
        # It may be paused, not dead: the store is polled for its answer, the whole
        # deadline, before the call stops.
        assert sum(scene.clock.sleeps) > deadline - 1.0
        assert scene.posts.sent == []
        assert (held.state, held.maybe_applied) == (State.INDETERMINATE, True)
        assert "lease lapsed unreleased" in held.evidence
        assert held.not_before == scene.clock.time() + hold
        scene.clock.advance(hold)
        _sent_once_after_the_hold(scene, profile)


@pytest.mark.parametrize("profile", list(PATHS))
def test_a_payment_whose_sender_process_exited_long_ago_is_sent_at_once(
    tmp_path: Path, profile: str
) -> None:
    hold = named(profile).in_flight_for + CLOCK_SKEW
    with after_a_killed_sender(tmp_path, profile, host="-") as scene:
        left = scene.client.store.get("op")
        assert left is not None
        assert left.lease_expires is not None
        # It may have sent until its lease's end: the hold from then is over too.
        scene.clock.advance(left.lease_expires + hold - scene.clock.time())
        _sent_once_after_the_hold(scene, profile)
        assert scene.clock.sleeps == []
