"""The async client's store calls under asyncio run in threads of the client's own
(`idemclient._worker`): attacked from outside, through the public client, against the
reference server, with its ledger counted.

- a process forked after its parent used an `AsyncClient` (a worker pool of a web
  server that preloads the app, `multiprocessing` with fork) pays as the parent does:
  the parent's store threads do not exist in the child, and a call handed to one of
  them would wait forever (its intent never written, its payment never sent).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BOUND = 60.0  # a bound on a test gone wrong, never a wait the test relies on

#: the parent pays, forks, and the child pays under its own key (each bounded)
FORKED = textwrap.dedent(
    """
    import asyncio, os, sys
    from idemclient import AsyncClient, State
    from idemclient.testing import ReferenceServer

    server = ReferenceServer()
    PAYMENT = {"amount": 1999, "currency": "EUR"}

    async def pay(store, operation):
        async with AsyncClient(
            base_url="http://psp.test",
            transport=server.transport,
            store=store,
            headers={"Authorization": "Bearer sk_test_secret"},
        ) as client:
            outcome = await asyncio.wait_for(
                client.post(
                    "/v1/payments",
                    json={**PAYMENT, "reference": operation},
                    operation_id=operation,
                ),
                10,
            )
        return outcome.state

    folder = sys.argv[1]
    assert asyncio.run(pay(folder + "/parent.db", "order-1")) is State.SUCCEEDED
    child = os.fork()
    if child == 0:
        try:
            state = asyncio.run(pay(folder + "/child.db", "order-2"))
            paid = len(server.ledger())
            print("child", state.value, paid, flush=True)
        except BaseException as error:
            print("child", type(error).__name__, error, flush=True)
        os._exit(0)
    os.waitpid(child, 0)
    print("parent", len(server.ledger()), flush=True)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is a POSIX call")
def test_a_process_forked_after_its_parent_paid_pays_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the child paid once (its ledger: the parent's payment and its own); the parent's
    # ledger holds its own only
    assert lines == ["child succeeded 2", "parent 1"], (lines, done.stderr)
