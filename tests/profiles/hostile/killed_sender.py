"""A client process killed (SIGKILL) right after the server applied its payment: the
answer never reaches its store, and the operation stays in flight under its lease.

Run by test_dead_owner.py: ``python -m tests.profiles.hostile.killed_sender STORE
SERVER_DB PROFILE PATH NOW HOST``. The server is a `ReferenceServer` on the file
SERVER_DB, in this process, so that its ledger outlives it; both clocks read NOW.
HOST ``-`` names this host in the lease's owner, another name makes the owner a
process of that host (one whose death this host cannot see).
"""

from __future__ import annotations

import os
import signal
import sys

import httpx

from idemclient import Client, ManualClock
from idemclient._store import _owners
from idemclient.testing import ReferenceServer

AUTH = {"Authorization": "Bearer alice"}
BODY = {"amount": 100, "currency": "EUR", "reference": "r1"}


class Killed(httpx.BaseTransport):
    """Hands the request to the server, then kills this process before the answer
    is read."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client asks the time first: answered
            return self.inner.handle_request(request)
        self.inner.handle_request(request)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def main(store: str, server_db: str, profile: str, path: str, now: str, host: str) -> None:
    if host != "-":
        _owners._HOST = host  # a process of another host, as far as the store can tell
    clock = ManualClock(float(now))
    with (
        ReferenceServer(profile=profile, clock=clock, db=server_db) as server,
        Client(
            store=store,
            clock=clock,
            headers=AUTH,
            profile=profile,
            base_url="http://psp.test",
            transport=Killed(server.transport),
        ) as client,
    ):
        client.post(path, json=BODY, operation_id="op")


if __name__ == "__main__":
    main(*sys.argv[1:7])
