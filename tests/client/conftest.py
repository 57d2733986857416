from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient import Client, ManualClock, RetryPolicy

from .fakes import FakePSP
from .two_callers import FirstCall, SharedOperation


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "client.db"


@pytest.fixture
def psp() -> FakePSP:
    return FakePSP()


@pytest.fixture
def client(store_path: Path, clock: ManualClock, psp: FakePSP) -> Iterator[Client]:
    with Client(
        store=store_path,
        clock=clock,
        transport=psp.transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        policy=RetryPolicy(),
    ) as opened:
        yield opened


@pytest.fixture(params=["sync", "async"])
def first_caller(request: pytest.FixtureRequest) -> FirstCall:
    """The first caller's call in a test of two callers (see two_callers.py): made by a
    `Client`, then by an `AsyncClient`."""
    if request.param == "sync":
        return SharedOperation.paid_by_a_client
    return SharedOperation.paid_by_an_async_client
