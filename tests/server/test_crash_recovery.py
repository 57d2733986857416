"""Kill the handler after every phase; recovery must finish it with exactly one effect.

The seed's recipe: "kill the process between each phase and assert the recovery path
completes it once". A crash leaves the row started with the lease held and breaks the
connection; then either the recovery worker or a client retry (once the lease expired)
resumes from `recovery_point`. Both must end with one resource, one effect at each
external system, and each handler run exactly once.
"""

from __future__ import annotations

import httpx
import pytest

from idemclient.testing import Phase

from .server_helpers import Env

CRASH_POINTS = [phase for phase in Phase if phase is not Phase.FINISHED]


def _assert_exactly_once(env: Env, key: str) -> None:
    [entry] = env.control.ledger()
    assert entry.idempotency_key == key
    assert (entry.status, entry.key_state) == ("succeeded", "finished")
    assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
    assert entry.journal == ("H1", "H2", "H3")


def _crash(env: Env, after: Phase, key: str) -> None:
    env.control.crash(after, key=key)
    with pytest.raises(httpx.RemoteProtocolError):
        env.post(key)
    record = env.control.key_record("alice", key)
    assert record.state == "started"
    assert record.locked_at is not None  # the dead worker still holds the lease
    expected_point = {
        Phase.ADMITTED: None,
        Phase.EXT1_CALLED: "EXT1_SENT",  # E1 answered, the outcome was never recorded
        Phase.EXT2_CALLED: "EXT2_SENT",
    }.get(after, after.value)
    assert record.recovery_point == expected_point


@pytest.mark.parametrize("after", CRASH_POINTS, ids=str)
def test_the_recovery_worker_finishes_a_request_whose_worker_died(
    inproc: Env, after: Phase
) -> None:
    _crash(inproc, after, "k-crash")
    # A fresh lease is respected: the worker leaves the row alone.
    assert inproc.control.recover().resumed == 0
    inproc.control.advance(inproc.server.lease + 0.5)
    report = inproc.control.recover()
    assert (report.examined, report.resumed, report.finished, report.unresolved) == (1, 1, 1, 0)
    _assert_exactly_once(inproc, "k-crash")
    assert inproc.control.recover().examined == 0  # nothing left to sweep


@pytest.mark.parametrize("after", CRASH_POINTS, ids=str)
def test_a_client_retry_after_the_lease_expired_finishes_it(inproc: Env, after: Phase) -> None:
    _crash(inproc, after, "k-crash")
    assert inproc.post("k-crash").status_code == 409
    inproc.control.advance(inproc.server.lease + 0.5)
    response = inproc.post("k-crash")
    assert response.status_code == 201
    _assert_exactly_once(inproc, "k-crash")
    assert inproc.post("k-crash").content == response.content


@pytest.mark.parametrize("after", CRASH_POINTS, ids=str)
def test_crash_and_recovery_on_both_sides_of_the_socket(env: Env, after: Phase) -> None:
    _crash(env, after, "k-live-crash")
    env.control.advance(env.server.lease + 0.5)
    assert env.control.recover().finished == 1
    _assert_exactly_once(env, "k-live-crash")
    replay = env.post("k-live-crash")
    assert replay.headers["idempotent-replayed"] == "true"


def test_apply_then_drop_commits_everything_and_the_retry_replays(env: Env) -> None:
    env.control.drop()
    with pytest.raises(httpx.RemoteProtocolError):
        env.post("k-drop")
    record = env.control.key_record("alice", "k-drop")
    assert (record.state, record.response_code, record.locked_at) == ("finished", 201, None)
    replay = env.post("k-drop")
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.text == record.response_body
    _assert_exactly_once(env, "k-drop")


def test_recovery_of_a_row_whose_external_system_is_still_down_stays_resumable(
    inproc: Env,
) -> None:
    _crash(inproc, Phase.EXT2_SENT, "k-still-down")
    inproc.control.advance(inproc.server.lease + 0.5)
    inproc.control.external_fault(2, "down")  # the resumer probes first, and is refused
    report = inproc.control.recover()
    assert (report.resumed, report.finished, report.unresolved) == (1, 0, 1)
    record = inproc.control.key_record("alice", "k-still-down")
    assert (record.state, record.recovery_point, record.locked_at) == ("started", "EXT2_SENT", None)
    assert inproc.control.recover().finished == 1  # released lease: the next sweep goes at once
    _assert_exactly_once(inproc, "k-still-down")


def test_the_worker_sweeps_only_stale_rows(inproc: Env) -> None:
    _crash(inproc, Phase.H1_DONE, "k-old")
    inproc.control.advance(inproc.server.lease + 0.5)
    _crash(inproc, Phase.H1_DONE, "k-young")  # crashed just now: its lease is fresh
    assert inproc.post("k-done").status_code == 201  # finished rows are never swept
    report = inproc.control.recover()
    assert (report.examined, report.resumed, report.finished) == (1, 1, 1)
    assert inproc.control.key_record("alice", "k-young").state == "started"
