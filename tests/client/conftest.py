from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient import Client, ManualClock, RetryPolicy

from .fakes import FakePSP


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
