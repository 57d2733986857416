"""A client killed (SIGKILL) at each point of an operation's life, then resumed: the same
key is sent again and the server applies the payment exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from idemclient import Client, State

from .ledger_psp import FileLedgerPSP

CHILD = Path(__file__).with_name("crash_child.py")


def run_child(store: Path, ledger: Path, point: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CHILD), str(store), str(ledger), point],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr


@pytest.mark.parametrize(
    ("point", "applied_before_resume", "state_left"),
    [
        ("after-intent", 0, State.IN_FLIGHT),  # key durable, nothing sent
        ("during-send", 0, State.IN_FLIGHT),  # request on its way, no answer
        ("after-apply", 1, State.IN_FLIGHT),  # applied; the answer died with the client
        ("after-outcome", 1, State.SUCCEEDED),  # all done before the kill
    ],
)
def test_killed_client_resumes_with_the_same_key_and_one_effect(
    tmp_path: Path, point: str, applied_before_resume: int, state_left: State
) -> None:
    store, ledger = tmp_path / "client.db", tmp_path / "ledger.jsonl"
    run_child(store, ledger, point)
    psp = FileLedgerPSP(ledger)
    assert sum(psp.effects().values()) == applied_before_resume
    with Client(store=store, transport=httpx.MockTransport(psp.handle)) as client:
        left = client.store.get("order-1")
        assert left is not None
        assert left.state is state_left
        outcomes = client.resume()  # the dead owner's lease is taken over at once
        final = client.operation("order-1")
    assert final is not None
    assert final.state is State.SUCCEEDED
    assert final.key == left.key
    assert psp.effects() == {left.key: 1}
    if state_left is State.SUCCEEDED:
        assert outcomes == []  # nothing unfinished to resume
    else:
        assert [o.key for o in outcomes] == [left.key]
