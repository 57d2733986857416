"""Fixtures for the reference-server tests.

`env` runs a test twice: once against the server in-process (httpx transport, faults
through the Python API) and once over a real loopback socket (uvicorn in a thread,
faults through the `/_sandbox/` HTTP endpoints via `SandboxClient`). Both expose the
same methods, so one test body pins the behaviour on both sides of the socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from server_helpers import Env

from idemclient.testing import ReferenceServer, SandboxClient, serve


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["in-process", "live"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    with ExitStack() as stack:
        server = stack.enter_context(ReferenceServer())
        if request.param == "live":
            live = stack.enter_context(serve(server))
            control = stack.enter_context(SandboxClient(live.url))
            result = Env("live", server, control, live.url, None)
        else:
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
