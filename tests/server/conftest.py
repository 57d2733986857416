"""Fixtures for the reference-server tests.

`env` runs a test twice: once against the server in-process (httpx transport, faults
through the Python API) and once over a real loopback socket (uvicorn in a thread,
faults through the `/_sandbox/` HTTP endpoints via `SandboxClient`). Both expose the
same methods, so one test body pins the behaviour on both sides of the socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from idemclient.testing import LiveServer, ReferenceServer, SandboxClient, serve

from .server_helpers import Env


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def shared_live_server() -> Iterator[LiveServer]:
    """One live server for the whole session, reset before each test that uses it.

    Stopping uvicorn takes ~0.2 s (its shutdown polls at 0.1 s); one server instead of
    one per test keeps the suite fast. Tests only use clock offsets, never absolutes.
    """
    with serve() as live:
        yield live


@pytest.fixture(params=["in-process", "live"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    with ExitStack() as stack:
        if request.param == "live":
            live: LiveServer = request.getfixturevalue("shared_live_server")
            live.server.reset()
            stack.callback(live.server.reset)
            # Plain HTTP on loopback: no CA bundle to load for every client.
            http = stack.enter_context(httpx.Client(verify=False))
            control = stack.enter_context(SandboxClient(live.url, client=http))
            result = Env("live", live.server, control, live.url, None)
        else:
            server = stack.enter_context(ReferenceServer())
            result = Env("in-process", server, server, "http://psp.test", server.transport)
        with result.stack:
            yield result


@pytest.fixture
def inproc(reference_server: ReferenceServer) -> Iterator[Env]:
    """The in-process variant alone, for tests that need no socket."""
    env = Env(
        "in-process",
        reference_server,
        reference_server,
        "http://psp.test",
        reference_server.transport,
    )
    with env.stack:
        yield env
