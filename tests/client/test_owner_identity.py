"""A lease's owner is judged dead only where its pid means that process.

Two containers may share a hostname and not a PID namespace (or a machine image and not
a boot): a pid written by a process of the other one names nothing here, or names
another process. Its lease is respected until it lapses, never taken over at once as a
dead process's; under an unguarded server the caller is never told "the process that
held it has exited" while that process may be sending. Only a process of this host,
boot and namespace that has exited is taken over at once.

The other container is simulated by the owner name its process writes: a real owner
name of a process of this namespace (a child that exited) with another namespace in it,
or the name an earlier version wrote (host, pid, token: no namespace at all).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient._intent import intent_for
from idemclient.store import SQLiteStore

from .test_ownership import PAYMENT, GatedPSP, client, dead_owner

KEY = "k-held-elsewhere"
LEASE = 70.0


def in_another_namespace(owner: str, *, pid: int | None = None) -> str:
    """`owner` as a process of another PID namespace on the same boot would write it:
    the namespace's inode differs (and the pid, if given)."""
    host, process, token, call = owner.split(":")
    written_pid, _, where = process.partition("@")
    space, _, started = where.rpartition(".")
    boot, _, inode = space.rpartition("-")
    other = str(int(inode) + 1) if inode.isdigit() else "4026532000"
    return f"{host}:{pid or written_pid}@{boot}-{other}.{started}:{token}:{call}"


def earlier_version(owner: str, *, pid: int | None = None) -> str:
    """`owner` as an earlier version wrote it: host, pid, token and call, no namespace."""
    host, process, token, call = owner.split(":")
    return f"{host}:{pid or process.partition('@')[0]}:{token}:{call}"


def held_by(path: Path, clock: ManualClock, psp: GatedPSP, owner: str) -> None:
    """Record the payment in flight, its lease held by `owner` for `LEASE` seconds."""
    with client(psp, path, clock, profile="gocardless") as c:
        request = c.http.build_request("POST", "/v1/payments", json=PAYMENT)
        request.headers["Idempotency-Key"] = KEY
        # As the other container's gocardless client recorded it.
        intent = dataclasses.replace(intent_for(request, request.read()), profile="gocardless")
        now = clock.time()
        begun = c.store.begin(intent, owner=owner, now=now, lease_until=now + LEASE)
        assert begun.record.state is State.IN_FLIGHT


def issue_again(path: Path, clock: ManualClock, psp: GatedPSP) -> Client:
    return client(psp, path, clock, profile="gocardless", policy=RetryPolicy(deadline=30.0))


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda o: in_another_namespace(o), id="another namespace, pid not here"),
        pytest.param(
            lambda o: in_another_namespace(o, pid=os.getpid()), id="another namespace, our pid"
        ),
        pytest.param(lambda o: earlier_version(o), id="earlier version, pid not here"),
        pytest.param(lambda o: earlier_version(o, pid=os.getpid()), id="earlier version, our pid"),
    ],
)
def test_a_lease_of_another_namespace_is_respected_until_it_lapses(
    tmp_path: Path, other: object
) -> None:
    clock = ManualClock()
    psp = GatedPSP()
    path = tmp_path / "c.db"
    owner = other(dead_owner())  # type: ignore[operator]
    held_by(path, clock, psp, owner)
    with issue_again(path, clock, psp) as c, pytest.raises(Indeterminate) as raised:
        c.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": KEY})
    told = str(raised.value)
    assert "has exited" not in told, told
    assert psp.keys == []  # nothing sent beside the other container's attempt
    with SQLiteStore(path) as store:
        record = store.get_by_key(KEY)
    assert record is not None
    assert (record.state, record.lease_owner) == (State.IN_FLIGHT, owner)


def test_a_lease_of_an_exited_process_of_this_namespace_is_taken_over_at_once(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    psp = GatedPSP()
    path = tmp_path / "c.db"
    held_by(path, clock, psp, dead_owner())
    before = clock.monotonic()
    with issue_again(path, clock, psp) as c, pytest.raises(Indeterminate) as raised:
        c.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": KEY})
    assert "the process that held it" in str(raised.value)
    assert "has exited" in str(raised.value)
    assert clock.monotonic() == before  # nobody waited on for an answer it will never write
    assert psp.keys == []  # held from that process's send, as the profile asks


def test_a_recycled_pid_of_this_namespace_is_not_its_owner(tmp_path: Path) -> None:
    """A live process under the owner's pid that started at another time is another
    process: the pid was given again, and the owner has exited."""
    clock = ManualClock()
    psp = GatedPSP()
    path = tmp_path / "c.db"
    host, process, token, call = dead_owner().split(":")
    where = process.partition("@")[2]
    space, _, started = where.rpartition(".")
    if not started and not sys.platform.startswith("linux"):
        pytest.skip("no process start times on this platform")
    assert started, "on Linux every owner is named with its process's start time"
    # A real, live process under a pid (it ends when killed below): no clock is waited on.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        recycled = f"{host}:{sleeper.pid}@{space}.{int(started) - 1}:{token}:{call}"
        held_by(path, clock, psp, recycled)
        with issue_again(path, clock, psp) as c, pytest.raises(Indeterminate) as raised:
            c.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": KEY})
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "has exited" in str(raised.value)
    assert psp.keys == []
