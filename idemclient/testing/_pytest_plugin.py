"""pytest fixtures for the reference server (registered through the pytest11 entry point).

- `reference_server`: a fresh in-process `ReferenceServer` (in-memory SQLite, a
  `ManualClock`): use `reference_server.transport` in any httpx client, sync or async.
- `live_reference_server`: a `LiveServer` on 127.0.0.1 and a free port, in a thread of
  the test process; `.url` for clients, `.server` for faults and the ledger.

Both are function-scoped: every test starts with no keys, no payments and no faults.
This module is loaded into every pytest run that has idemclient installed (it is the
module the pytest11 entry point names, so it stays at this path). Loading it loads the
`idemclient.testing` package, its parent; nothing more happens until a fixture is
used: no server is built, no database opened, and uvicorn (for the live server) is
imported only by `live_reference_server`.
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
