"""Fault injection: scripted answers, delays, drops, external systems, reset, the sandbox API."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import pytest

from idemclient.testing import ReferenceServer, ServerRequest

from .server_helpers import BODY, Env


@pytest.mark.parametrize(
    ("kwargs", "headers"),
    [
        ({"retry_after": 30}, {"retry-after": "30"}),  # delta-seconds
        (  # an HTTP-date
            {"retry_after": datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)},
            {"retry-after": "Wed, 02 Jan 2030 03:04:05 GMT"},
        ),
        ({"retry_after_ms": 1500}, {"retry-after-ms": "1500"}),
        (
            {"retry_after": 2, "retry_after_ms": 2500},
            {"retry-after": "2", "retry-after-ms": "2500"},
        ),
        ({"retry_after": "soon"}, {"retry-after": "soon"}),  # garbage, for the client to survive
        ({"retry_after": -1}, {"retry-after": "-1"}),
        ({"headers": {"Stripe-Should-Retry": "true"}}, {"stripe-should-retry": "true"}),
    ],
)
def test_scripted_answers_carry_retry_after_in_every_form(
    env: Env, kwargs: dict, headers: dict[str, str]
) -> None:
    env.control.answer(503, **kwargs)
    response = env.post("k-503")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 503
    for name, value in headers.items():
        assert response.headers[name] == value


def test_retry_after_as_a_date_relative_to_the_server_clock(env: Env) -> None:
    env.control.answer(429, retry_after_date_in=90)
    response = env.post("k-429")
    when = parsedate_to_datetime(response.headers["retry-after"])
    assert when.timestamp() == int(env.control.now()) + 90


def test_a_scripted_answer_may_have_any_status_and_body(env: Env) -> None:
    env.control.answer(500, body=b'{"oops":true}')
    response = env.post("k-500")
    assert (response.status_code, response.json()) == (500, {"oops": True})
    assert response.headers["content-type"] == "application/json"
    assert env.post("k-500").status_code == 201  # the 500 was never processed


def test_scripts_apply_to_the_next_n_matching_requests_in_order(env: Env) -> None:
    env.control.answer(429, times=2, key="k-a")
    env.control.answer(503, path="/v1/payouts")
    assert env.post("k-b").status_code == 201  # neither matches
    assert env.post("k-a").status_code == 429
    assert env.post("k-c", path="/v1/payouts").status_code == 503
    assert env.post('"k-a"').status_code == 429  # the quoted form is the same key
    assert env.post("k-a").status_code == 201  # used up
    assert env.client().get("/v1/payments", params={"reference": "inv-1"}).status_code == 200


def test_scripted_answers_come_before_authentication(env: Env) -> None:
    # A gateway in front of the server: it answers before anyone checks credentials.
    env.control.answer(503)
    assert env.post("k", token=None).status_code == 503


def test_a_delay_past_the_client_timeout_is_a_read_timeout_after_the_effect(
    inproc: Env,
) -> None:
    before = inproc.control.now()
    inproc.control.delay(60)
    with pytest.raises(httpx.ReadTimeout):
        inproc.post("k-slow", timeout=5)
    assert inproc.control.now() == before + 5  # only the client's timeout passed, no sleep
    [entry] = inproc.control.ledger()  # but the payment was made
    assert (entry.key_state, entry.ext1_applied, entry.ext2_applied) == ("finished", 1, 1)
    assert inproc.post("k-slow").headers["idempotent-replayed"] == "true"


def test_a_delay_inside_the_client_timeout_is_only_slow(inproc: Env) -> None:
    before = inproc.control.now()
    inproc.control.delay(2)
    assert inproc.post("k-slowish", timeout=5).status_code == 201
    assert inproc.control.now() == before + 2


def test_a_delay_with_no_client_timeout_never_times_out(inproc: Env) -> None:
    inproc.control.delay(3600)
    assert inproc.post("k-patient", timeout=None).status_code == 201


def test_a_delay_over_a_real_socket_really_waits(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.control.delay(0.5 if env.live else 60)
    handled = threading.Event()
    handle = env.server.handle

    def handle_and_note(request: ServerRequest) -> object:
        answer = handle(request)
        handled.set()
        return answer

    monkeypatch.setattr(env.server, "handle", handle_and_note)
    with pytest.raises(httpx.ReadTimeout):
        env.post("k-slow", timeout=0.1)
    # The request was processed before the delay began: the retry is a replay. On a
    # loaded machine the server's thread may still be processing it when the client's
    # 0.1 s runs out (the retry would then meet it in flight): wait for it, bounded.
    assert handled.wait(timeout=20)
    assert env.post("k-slow").headers["idempotent-replayed"] == "true"


def test_external_faults_are_used_up_per_interaction(env: Env) -> None:
    env.control.external_fault(1, "timeout", times=3)  # call, probe, then next request's probe
    assert env.post("k-1").status_code == 202
    assert env.post("k-1").status_code == 202  # the resumer's probe times out too
    assert env.post("k-1").status_code == 201
    [entry] = env.control.ledger()
    assert (entry.ext1_applied, entry.ext1_calls) == (1, 1)


def test_a_decline_is_used_only_by_a_new_instruction(inproc: Env) -> None:
    inproc.control.external_fault(2, "apply_then_timeout", times=2)
    assert inproc.post("k-first").status_code == 202
    inproc.control.external_fault(2, "decline")
    # The resumer's probe finds the earlier approval: the decline stays queued...
    assert inproc.post("k-first").status_code == 201
    # ...for the next new instruction.
    assert inproc.post("k-second").status_code == 402


def test_reset_forgets_keys_resources_effects_and_faults(env: Env) -> None:
    assert env.post("k-reset").status_code == 201
    env.control.answer(503, times=5)
    env.control.external_fault(1, "down", times=5)
    env.control.reset()
    assert env.control.ledger() == ()
    assert env.control.key_record("alice", "k-reset") is None
    response = env.post("k-reset")
    assert response.status_code == 201
    assert "idempotent-replayed" not in response.headers


def test_the_clock_only_moves_forward(env: Env) -> None:
    start = env.control.now()
    assert env.control.advance(10) == start + 10
    with pytest.raises((ValueError, httpx.HTTPStatusError)):
        env.control.advance(-1)
    assert env.control.now() == start + 10


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/_sandbox/faults", b'{"kind": "explode"}', 400),
        ("/_sandbox/faults", b'{"kind": "answer"}', 400),  # status missing
        ("/_sandbox/faults", b'{"kind": "answer", "status": 99}', 400),
        ("/_sandbox/faults", b'{"kind": "delay", "seconds": -1}', 400),
        ("/_sandbox/faults", b'{"kind": "crash", "after": "LUNCH"}', 400),
        ("/_sandbox/faults", b'{"kind": "drop", "times": 0}', 400),
        ("/_sandbox/faults", b'{"kind": "drop", "tiems": 2}', 400),  # a typo is not ignored
        ("/_sandbox/faults", b"[]", 400),
        ("/_sandbox/faults", b"{", 400),
        # a header value no server can send: a Retry-After or a header with CR/LF (it
        # would inject a header of its own, or break the answer), NUL, or beyond Latin-1
        (
            "/_sandbox/faults",
            b'{"kind": "answer", "status": 503, "retry_after": "1\\r\\nX: y"}',
            400,
        ),
        ("/_sandbox/faults", b'{"kind": "answer", "status": 503, "retry_after": "5\\n"}', 400),
        ("/_sandbox/faults", b'{"kind": "answer", "status": 503, "retry_after": "5\\u0000"}', 400),
        ("/_sandbox/faults", b'{"kind": "answer", "status": 429, "retry_after": "\\u2460"}', 400),
        (
            "/_sandbox/faults",
            b'{"kind": "answer", "status": 503, "headers": {"X-A": "b\\rc"}}',
            400,
        ),
        ("/_sandbox/faults", b'{"kind": "answer", "status": 503, "headers": {"X A": "b"}}', 400),
        ("/_sandbox/external/3", b'{"mode": "down"}', 404),
        ("/_sandbox/external/1", b'{"mode": "sulking"}', 400),
        ("/_sandbox/clock", b'{"advance": "later"}', 400),
        ("/_sandbox/nothing", b"", 404),
    ],
)
def test_bad_sandbox_requests_are_refused_and_script_nothing(
    env: Env, path: str, body: bytes, status: int
) -> None:
    response = env.client(token=None).post(path, content=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert env.server.pending_faults() == 0
    assert env.post("k-after").status_code == 201


def test_the_noop_endpoint_does_no_work(env: Env) -> None:
    response = env.client(token=None).post("/_sandbox/noop")
    assert (response.status_code, response.json()) == (200, {})
    assert env.control.ledger() == ()


def test_a_server_without_the_sandbox_hides_its_controls() -> None:
    with ReferenceServer(sandbox=False) as server:
        answer = server.handle(ServerRequest.build("GET", "/_sandbox/ledger"))
        assert getattr(answer, "status", None) == 404
        server.answer(503)  # the Python API still works
        answer = server.handle(ServerRequest.build("POST", "/v1/payments"))
        assert getattr(answer, "status", None) == 503


def test_a_forgotten_gate_lets_the_call_through_after_its_timeout(inproc: Env) -> None:
    gate = inproc.server.hold_external(1, timeout=0.05)  # a bounded wait in the server
    assert inproc.post("k-gate").status_code == 201
    assert gate.reached


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.answer(600), "HTTP status"),
        (lambda s: s.answer(503, retry_after="1\r\nSet-Cookie: a=b"), "Retry-After"),
        (lambda s: s.answer(503, headers={"X-Note": "a\nb"}), "X-Note"),
        (lambda s: s.answer(503, headers={"Bad Name": "b"}), "header name"),
        (lambda s: s.delay(float("inf")), "finite"),
        (lambda s: s.crash("NEVER"), "not a valid Phase"),
        (lambda s: s.drop(times=0), "at least 1"),
        (lambda s: s.external_fault(3, "down"), "external systems 1 and 2"),
        (lambda s: s.external_fault(1, "sulking"), "not a valid ExternalMode"),
        (lambda s: s.external_fault(1, "down", times=0), "at least 1"),
    ],
)
def test_bad_fault_scripts_are_refused_in_python_too(
    reference_server: ReferenceServer, call, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        call(reference_server)
    assert reference_server.pending_faults() == 0


def test_a_scripted_body_is_sent_as_given(inproc: Env) -> None:
    inproc.control.answer(200, body=b"plain", headers={"Content-Type": "text/plain"})
    response = inproc.client().get("/v1/payments", params={"reference": BODY["reference"]})
    assert (response.status_code, response.text) == (200, "plain")
    assert response.headers["content-type"] == "text/plain"


def test_a_drop_cuts_any_answer_including_a_replay_or_a_look_up(env: Env) -> None:
    first = env.post("k-cut")
    env.control.drop(key="k-cut")
    with pytest.raises(httpx.RemoteProtocolError):
        env.post("k-cut")
    env.control.drop(path="/v1/payments")
    with pytest.raises(httpx.RemoteProtocolError):
        env.client().get("/v1/payments", params={"idempotency_key": "k-cut"})
    assert env.post("k-cut").content == first.content


def test_a_crash_at_a_phase_the_request_never_reaches_changes_nothing(env: Env) -> None:
    first = env.post("k-never")
    env.control.crash("H1_DONE", key="k-never")
    replay = env.post("k-never")  # a replay runs no phase: answered normally
    assert replay.content == first.content
    assert env.server.pending_faults() == 0  # and the script was used up
