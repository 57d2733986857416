"""The seed's diagrams 1 to 4 as tests, plus the races its correctness checks rule out."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from idemclient.testing import (
    DropConnection,
    LiveServer,
    ReferenceServer,
    ServerRequest,
    ServerResponse,
)
from idemclient.testing._storage.sqlite import Storage

from .server_helpers import BODY, Env


class Background:
    """Runs one request in a thread; `result()` waits (bounded) for its outcome."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self._outcome: list[httpx.Response | BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(send,), daemon=True)
        self._thread.start()

    def _run(self, send: Callable[[], httpx.Response]) -> None:
        try:
            self._outcome.append(send())
        except BaseException as exc:
            self._outcome.append(exc)

    def result(self) -> httpx.Response | BaseException:
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the background request did not finish"
        return self._outcome[0]


# -- diagram 1: the happy path -------------------------------------------------------------


def test_diagram_1_each_phase_commits_before_the_next_external_call(inproc: Env) -> None:
    server = inproc.server
    gate1 = server.hold_external(1)
    gate2 = server.hold_external(2)
    request = Background(lambda: inproc.post("k-d1"))

    assert gate1.wait_until_reached()
    # Intent before the call: EXT1_SENT (and the resource from Handler1) are durable
    # while E1 has the instruction.
    record = server.key_record("alice", "k-d1")
    assert (record.state, record.recovery_point, record.attempts) == ("started", "EXT1_SENT", 1)
    assert record.locked_at == server.now()
    [entry] = server.ledger()
    assert (entry.status, entry.journal, entry.ext1_calls) == ("pending", ("H1",), 0)
    gate1.release()

    assert gate2.wait_until_reached()
    # Outcome after the call: E1's answer and Handler2 committed before E2 is called.
    record = server.key_record("alice", "k-d1")
    assert (record.recovery_point, record.attempts) == ("EXT2_SENT", 2)
    [entry] = server.ledger()
    assert (entry.status, entry.journal, entry.ext1_applied) == ("authorized", ("H1", "H2"), 1)
    external = inproc.client().get(f"/v1/payments/{entry.resource_id}").json()["external"]
    assert external["ext1"] is not None
    assert external["ext2"] is None
    gate2.release()

    response = request.result()
    assert isinstance(response, httpx.Response)
    assert response.status_code == 201
    # The final transaction: finished, response stored, lease cleared.
    record = server.key_record("alice", "k-d1")
    assert (record.state, record.recovery_point, record.locked_at) == (
        "finished",
        "EXT2_DONE",
        None,
    )
    assert (record.response_code, record.response_body) == (201, response.text)
    [entry] = server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied, entry.ext1_calls, entry.ext2_calls) == (
        1,
        1,
        1,
        1,
    )
    assert entry.journal == ("H1", "H2", "H3")


# -- diagram 2: the client retries before the request is fulfilled -------------------------


def test_diagram_2_a_retry_while_in_flight_is_409_then_the_stored_response(env: Env) -> None:
    gate = env.server.hold_external(1)  # A's call to E1 is slow
    first = Background(lambda: env.post("k-d2"))
    assert gate.wait_until_reached()

    retry = env.post("k-d2")  # B: the key exists, started, lease fresh
    assert retry.status_code == 409
    assert retry.headers["retry-after"] == "1"
    [entry] = env.control.ledger()
    assert (entry.journal, entry.ext1_calls) == (("H1",), 0)  # the retry did no work

    gate.release()
    original = first.result()
    assert isinstance(original, httpx.Response)
    assert original.status_code == 201

    later = env.post("k-d2")
    assert later.status_code == 201
    assert later.headers["idempotent-replayed"] == "true"
    assert later.content == original.content
    [entry] = env.control.ledger()
    assert (entry.ext1_applied, entry.ext2_applied, entry.journal) == (1, 1, ("H1", "H2", "H3"))


def test_diagram_2_with_the_client_timing_out_over_a_real_socket(
    live_reference_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = live_reference_server.server
    # Every adapter answers through `server.handle`: note each payment it creates, so
    # the test can wait on that instead of on the clock.
    created = threading.Event()
    handle = server.handle

    def handle_and_note(request: ServerRequest) -> ServerResponse | DropConnection:
        answer = handle(request)
        if isinstance(answer, ServerResponse) and answer.status == 201:
            created.set()
        return answer

    monkeypatch.setattr(server, "handle", handle_and_note)
    gate = server.hold_external(1)
    with httpx.Client(
        base_url=live_reference_server.url, headers={"Authorization": "Bearer alice"}
    ) as client:

        def post(timeout: float = 5.0) -> httpx.Response:
            return client.post(
                "/v1/payments", json=BODY, headers={"Idempotency-Key": "k"}, timeout=timeout
            )

        # A real read timeout: short and bounded, the only honest way to time out on a socket.
        with pytest.raises(httpx.ReadTimeout):
            post(timeout=0.2)
        # The timeout says nothing of how far A got: on a loaded machine the server's
        # thread may reach the gate after it. Wait for that (bounded), not for the clock.
        assert gate.wait_until_reached(timeout=20)
        assert post().status_code == 409
        gate.release()
        # A, abandoned by its client, still finishes on the server, in the server's
        # worker thread: wait (bounded) until it has answered with the payment.
        assert created.wait(timeout=20), "the abandoned request did not finish"
        later = post()
    assert later.status_code == 201
    assert later.headers["idempotent-replayed"] == "true"
    [entry] = server.ledger()
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)


# -- diagram 3: a timeout while talking to external system 2 --------------------------------


@pytest.mark.parametrize(
    ("mode", "ext2_applied"),
    [
        ("timeout", 0),  # lost on the way: nothing applied, and nobody can know that yet
        ("apply_then_timeout", 1),  # applied, answer lost: the same 202, honestly
    ],
)
def test_diagram_3_an_unknown_outcome_is_202_and_the_row_is_left_to_resume(
    env: Env, mode: str, ext2_applied: int
) -> None:
    env.control.external_fault(2, mode, times=2)  # the call and the inline probe
    response = env.post("k-d3")
    assert response.status_code == 202
    payment = response.json()
    record = env.control.key_record("alice", "k-d3")
    assert record.state == "started"
    assert record.recovery_point == "EXT2_SENT"  # "an instruction may be out there with K2"
    assert record.locked_at is None  # released: the next actor need not wait out a lease
    assert record.attempts == 2
    assert record.last_attempt_at == env.control.now()
    [entry] = env.control.ledger()
    assert entry.journal == ("H1", "H2")  # Handler3 must not run
    assert (entry.status, entry.ext2_applied) == ("authorized", ext2_applied)
    looked_up = env.client().get(f"/v1/payments/{payment['id']}").json()
    assert looked_up["status"] == "authorized"


@pytest.mark.parametrize(
    ("mode", "ext2_calls"),
    [
        ("timeout", 1),  # probe: never received; call again with K2, which applies
        ("apply_then_timeout", 1),  # probe: found; no second call at all
        ("down", 1),  # refused, probe: never received; call again
    ],
)
def test_diagram_3_one_inline_probe_often_settles_it(env: Env, mode: str, ext2_calls: int) -> None:
    env.control.external_fault(2, mode, times=1)
    response = env.post("k-d3-probe")
    assert response.status_code == 201
    [entry] = env.control.ledger()
    assert (entry.ext2_applied, entry.ext2_calls) == (1, ext2_calls)
    assert entry.journal == ("H1", "H2", "H3")


# -- diagram 4: an incomplete request resumed on a client retry ----------------------------


@pytest.mark.parametrize(
    ("crash_after", "ext2_calls"),
    [
        ("EXT2_SENT", 1),  # E2 never received it: probe says so, call again with K2
        ("EXT2_CALLED", 1),  # E2 applied it, the worker died before recording: probe finds it
    ],
)
def test_diagram_4_a_retry_after_the_lease_expired_takes_over_and_resumes(
    env: Env, crash_after: str, ext2_calls: int
) -> None:
    env.control.crash(crash_after)
    with pytest.raises(httpx.RemoteProtocolError):
        env.post("k-d4")
    assert env.post("k-d4").status_code == 409  # the lease is still fresh
    env.control.advance(env.server.lease + 1)

    resumed = env.post("k-d4")
    assert resumed.status_code == 201  # this retry, not the original, gets the answer
    assert "idempotent-replayed" not in resumed.headers
    [entry] = env.control.ledger()
    assert entry.journal == ("H1", "H2", "H3")  # Handler1 and Handler2 were not re-run
    assert (entry.ext1_applied, entry.ext1_calls) == (1, 1)
    assert (entry.ext2_applied, entry.ext2_calls) == (1, ext2_calls)
    record = env.control.key_record("alice", "k-d4")
    assert (record.state, record.locked_at) == ("finished", None)


def test_diagram_4_after_a_202_the_next_retry_resumes_at_once(env: Env) -> None:
    env.control.external_fault(2, "apply_then_timeout", times=2)
    accepted = env.post("k-d4-202")
    assert accepted.status_code == 202
    resumed = env.post("k-d4-202")  # no clock change: the lease was released
    assert resumed.status_code == 201
    assert resumed.json()["id"] == accepted.json()["id"]
    [entry] = env.control.ledger()
    # The resumer probed first and found E2's record: one delivery, one effect.
    assert (entry.ext2_applied, entry.ext2_calls) == (1, 1)


def test_diagram_4_a_retry_after_the_worker_finished_gets_the_stored_response(env: Env) -> None:
    env.control.crash("H2_DONE")
    with pytest.raises(httpx.RemoteProtocolError):
        env.post("k-d4-worker")
    env.control.advance(env.server.lease + 1)
    report = env.control.recover()
    assert (report.resumed, report.finished) == (1, 1)
    retry = env.post("k-d4-worker")
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.text == env.control.key_record("alice", "k-d4-worker").response_body


# -- races the correctness checks rule out ----------------------------------------------------


def test_of_two_takeovers_of_one_stale_row_exactly_one_wins() -> None:
    storage = Storage()
    storage.admit(
        client="c",
        key="k",
        request_hash=b"h",
        endpoint="/v1/payments",
        request_body=b"{}",
        owner="dead",
        now=0.0,
    )
    first = storage.take_over(client="c", key="k", owner="a", now=100.0, stale_before=70.0)
    second = storage.take_over(client="c", key="k", owner="b", now=100.0, stale_before=70.0)
    assert first is not None
    assert first.lease_owner == "a"
    assert second is None
    storage.close()


def test_a_retry_racing_a_resumer_gets_409(inproc: Env) -> None:
    server = inproc.server
    server.crash("EXT2_SENT")
    with pytest.raises(httpx.RemoteProtocolError):
        inproc.post("k-race")
    server.advance(server.lease + 1)
    gate = server.hold_external(2)
    resumer = Background(lambda: inproc.post("k-race"))  # takes over, probes, calls E2
    assert gate.wait_until_reached()
    assert inproc.post("k-race").status_code == 409  # the new lease is fresh
    gate.release()
    result = resumer.result()
    assert isinstance(result, httpx.Response)
    assert result.status_code == 201
    [entry] = server.ledger()
    assert (entry.ext2_applied, entry.journal) == (1, ("H1", "H2", "H3"))


def test_an_attempt_that_stalled_past_its_lease_cannot_commit_after_a_takeover(
    inproc: Env,
) -> None:
    server = inproc.server
    gate = server.hold_external(1)
    stalled = Background(lambda: inproc.post("k-fence"))
    assert gate.wait_until_reached()
    server.advance(server.lease + 1)  # A is silent for longer than its lease
    takeover = inproc.post("k-fence")  # B takes over and finishes the request
    assert takeover.status_code == 201

    gate.release()  # A wakes up: E1 answers its (same-key) call as a replay...
    late = stalled.result()
    assert isinstance(late, httpx.Response)
    assert late.status_code == 409  # ...and its fenced commit finds the lease gone
    [entry] = server.ledger()
    assert (entry.ext1_applied, entry.ext1_calls) == (1, 2)  # delivered twice, applied once
    assert (entry.ext2_applied, entry.journal) == (1, ("H1", "H2", "H3"))
    replay = inproc.post("k-fence")
    assert replay.content == takeover.content


def test_two_tenants_with_the_same_key_are_separate_payments(env: Env) -> None:
    alice = env.post("req-001")
    bob = env.post("req-001", token="bob")
    assert alice.status_code == bob.status_code == 201
    assert "idempotent-replayed" not in bob.headers
    assert alice.json()["id"] != bob.json()["id"]
    ledger = env.control.ledger()
    assert sorted(e.client for e in ledger) == ["alice", "bob"]
    # Derived keys include the client: each tenant's payment is one effect of its own.
    assert all((e.ext1_applied, e.ext2_applied) == (1, 1) for e in ledger)


def test_the_stored_server_is_usable_through_the_reference_server_fixture(
    reference_server: ReferenceServer,
) -> None:
    with httpx.Client(
        transport=reference_server.transport, headers={"Authorization": "Bearer t"}
    ) as client:
        response = client.post(
            "http://x/v1/payments", json=BODY, headers={"Idempotency-Key": "fixture"}
        )
    assert response.status_code == 201
    assert reference_server.ledger()[0].idempotency_key == "fixture"
