"""pytest fixtures for the reference server (registered through the pytest11 entry point).

- `reference_server`: a fresh in-process `ReferenceServer` (in-memory SQLite, a
  `ManualClock`): use `reference_server.transport` in any httpx client, sync or async.
- `live_reference_server`: a `LiveServer` on 127.0.0.1 and a free port, in a thread of
  the test process; `.url` for clients, `.server` for faults and the ledger.

Both are function-scoped: every test starts with no keys, no payments and no faults.
This module is loaded into every pytest run of every project that has idemclient
installed, so it sits outside `idemclient.testing` and imports nothing of it (nor httpx,
nor the client) until a fixture is used: a run that uses neither fixture pays for this
file and for `idemclient`'s own light top level only (see docs/performance.md). uvicorn
(for the live server) is imported only by `live_reference_server`. The plugin's name
is `idemclient`: `pytest -p no:idemclient` leaves it out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from idemclient.testing import LiveServer, ReferenceServer


@pytest.fixture
def reference_server() -> Iterator[ReferenceServer]:
    """An in-process reference server with a manual clock."""
    from idemclient.testing import ReferenceServer

    with ReferenceServer() as server:
        yield server


@pytest.fixture
def live_reference_server() -> Iterator[LiveServer]:
    """A reference server on a real loopback socket, with a manual clock."""
    from idemclient.testing import serve

    with serve() as live:
        yield live
