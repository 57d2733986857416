"""Many callers, one operation: one sends, the others wait for its answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemclient import Client, ManualClock, NotSent, OutcomeError, RetryPolicy, State

from .fakes import FakePSP, Fault, error, status
from .ledger_psp import FileLedgerPSP
from .storms import storm_of_threads

PAYMENT = {"amount": 700, "currency": "EUR"}


def test_a_storm_of_threads_on_one_operation_makes_one_effect(store_path: Path) -> None:
    storm_of_threads(store_path, callers=100)


PROCESS = """
import sys, httpx
sys.path.insert(0, {here!r})
from ledger_psp import FileLedgerPSP
from idemclient import Client
psp = FileLedgerPSP({ledger!r})
with Client(store={store!r}, transport=httpx.MockTransport(psp.handle)) as client:
    for n in range(20):
        client.post("http://psp.test/v1/payments", json={{"n": n}}, operation_id=f"op-{{n}}")
"""


def test_processes_sharing_a_store_send_each_operation_once(tmp_path: Path) -> None:
    store, ledger = tmp_path / "shared.db", tmp_path / "ledger.jsonl"
    code = PROCESS.format(here=str(Path(__file__).parent), ledger=str(ledger), store=str(store))
    children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [child.wait(timeout=60) for child in children] == [0, 0, 0, 0]
    effects = FileLedgerPSP(ledger).effects()
    assert len(effects) == 20
    assert set(effects.values()) == {1}
    with Client(store=store) as client:
        assert client.store.counts()[State.SUCCEEDED] == 20


FAULTS = st.sampled_from(
    [
        status(503, retry_after="1"),
        status(429, retry_after_ms="2500"),
        status(503, retry_after="30"),
        status(409, retry_after="5"),
        status(500),
        status(503, retry_after="garbage"),
        status(202),
        error(httpx.ReadTimeout, apply=True),
        error(httpx.ConnectError),
        Fault(),
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    script=st.lists(FAULTS, max_size=12), deadline=st.floats(1.0, 120.0), seed=st.integers(0, 99)
)
def test_sleeps_never_exceed_the_deadline_nor_shorten_a_server_wait(
    tmp_path_factory: pytest.TempPathFactory, script: list[Fault], deadline: float, seed: int
) -> None:
    import random

    psp = FakePSP(*script)
    clock = ManualClock()
    policy = RetryPolicy(deadline=deadline, max_attempts=20)
    store = tmp_path_factory.mktemp("prop") / "p.db"
    asked: list[float] = []

    def watch(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the time probe: no attempt, no wait
            return psp.handler(request)
        asked.append(0.0)  # replaced below when the answer names a wait
        response = psp.handler(request)
        value = response.headers.get("retry-after")
        millis = response.headers.get("retry-after-ms")
        if millis:
            asked[-1] = float(millis) / 1000
        elif value and value.isdigit():
            asked[-1] = float(value)
        return response

    with Client(
        store=store,
        clock=clock,
        policy=policy,
        rng=random.Random(seed),
        transport=httpx.MockTransport(watch),
        base_url="http://psp.test",
    ) as client:
        ended: OutcomeError | None = None
        try:
            outcome = client.post("/v1/payments", json=PAYMENT)
        except OutcomeError as exc:
            ended = exc
        else:
            assert outcome.state is State.SUCCEEDED
    if ended is not None:
        assert ended.outcome.state in (State.INDETERMINATE, State.NOT_SENT)
        assert isinstance(ended, NotSent) is (not ended.outcome.maybe_applied)
    assert sum(clock.sleeps) < deadline
    for wait, server_wait in zip(clock.sleeps, asked, strict=False):
        assert wait >= server_wait  # the server's wait is a floor
    assert sum(psp.effects.values()) <= 1
