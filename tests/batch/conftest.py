from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    """The reference server on 127.0.0.1. Real time: the submitter is another process
    on the real clock; the server's own clock is moved with `server.advance`."""
    server = ReferenceServer(clock=SystemClock(), db=str(tmp_path / "psp.sqlite3"))
    with server, serve(server) as running:
        yield running
