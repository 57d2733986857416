"""Every server profile over a real loopback socket: uvicorn in a thread (`serve`), faults
through the `/_sandbox/` endpoints, and `idemclient server --profile` as a child process.

The answers are the ones test_server_answers.py pins in process; here each profile's new key,
replay, key reuse, a request still running and apply-then-drop go through a socket.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner

from idemclient.cli import main
from idemclient.testing import ReferenceServer, SandboxClient, serve, spawn

from .server_speakers import (
    ALL,
    AUTH,
    BODY,
    JSON,
    PROBLEM,
    Speaker,
    gocardless_conflict,
    replay_status,
    uuid_key,
)

KEY = uuid_key(11)

#: (status of "still running", status of "same key, other request"); None: runs again
LIVE: dict[str, tuple[int | None, int]] = {
    "reference": (409, 422),
    "generic": (409, 422),
    "ietf": (409, 422),
    "stripe": (409, 400),
    "adyen": (422, 201),
    "paypal": (None, 201),
    "square": (None, 400),
    "gocardless": (409, 409),
    "checkout": (409, 201),
    "wise": (None, 201),
    "mollie": (409, 400),
    "razorpay": (500, 400),
    "django-idempotency-key": (None, 201),
    "drf-idempotency-key": (409, 409),
}
MARKED = {"reference", "generic", "stripe", "mollie"}


@pytest.fixture(params=ALL)
def live(request: pytest.FixtureRequest) -> Iterator[tuple[Speaker, SandboxClient]]:
    name = request.param
    with (
        ReferenceServer(profile=name) as server,
        serve(server) as running,
        httpx.Client(base_url=running.url, headers=AUTH, verify=False) as client,
        SandboxClient(running.url, client=client) as sandbox,
    ):
        yield Speaker(name, server, client), sandbox


def test_each_profile_over_a_socket(live: tuple[Speaker, SandboxClient]) -> None:
    speaker, sandbox = live
    name = speaker.name
    running, reused = LIVE[name]

    created = speaker.post(KEY)
    assert created.status_code == 201, created.text
    assert created.json()["idempotency_key"] == KEY

    replay = speaker.post(KEY)
    assert replay.status_code == replay_status(name)
    if name == "gocardless":
        assert replay.json() == gocardless_conflict(created.json()["id"])
    else:
        assert replay.content == created.content
    assert ("idempotent-replayed" in replay.headers) == (name in MARKED)

    other = speaker.post(KEY, {**BODY, "amount": 9999})
    assert other.status_code == reused, other.text
    if name in ("reference", "generic", "ietf"):
        assert other.headers["content-type"] == PROBLEM

    # A worker dies holding the lease; the next request with its key finds it running.
    sandbox.crash("H1_DONE")
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(uuid_key(12))
    busy = speaker.post(uuid_key(12))
    if running is None:
        assert busy.status_code == 201  # no in-flight guard: it ran too
    else:
        assert busy.status_code == running, busy.text
    if name == "adyen":
        assert busy.headers["transient-error"] == "true"
        assert busy.json()["errorCode"] == "704"
    if name == "stripe":
        assert busy.headers["content-type"] == JSON
        assert busy.json()["error"]["code"] == "idempotency_key_in_use"

    # Apply-then-drop: applied once, and the retry gets the profile's replay.
    sandbox.drop()
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(uuid_key(13))
    assert speaker.post(uuid_key(13)).status_code == replay_status(name)
    entries = [e for e in sandbox.ledger() if e.idempotency_key == uuid_key(13)]
    assert [(e.ext1_applied, e.ext2_applied) for e in entries] == [(1, 1)]


def test_the_command_speaks_the_profile_it_is_given() -> None:
    with spawn(profile="stripe") as child, httpx.Client(base_url=child.url, headers=AUTH) as http:
        headers = {"Idempotency-Key": "cli-1"}
        first = http.post("/v1/payment_intents", json=BODY, headers=headers)
        assert first.status_code == 201
        again = http.post("/v1/payment_intents", json=BODY, headers=headers)
        assert (again.content, again.headers["idempotent-replayed"]) == (first.content, "true")
        reused = http.post("/v1/payment_intents", json={**BODY, "amount": 1}, headers=headers)
        assert reused.status_code == 400
        assert reused.json()["error"]["type"] == "idempotency_error"


def test_the_command_refuses_an_unknown_profile_and_lists_the_options() -> None:
    refused = CliRunner().invoke(main, ["server", "--profile", "nope", "--port", "0"])
    assert refused.exit_code == 2
    assert "'nope' is not one of" in refused.output
    helped = CliRunner().invoke(main, ["server", "--help"])
    assert "--profile" in helped.output
    assert "gocardless" in helped.output
