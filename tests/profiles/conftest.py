"""Fixtures of the profile tests: a client in a given profile on a scripted server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock

from .scripted import Scripted


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def make(store_path: Path, clock: ManualClock) -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def build(server: Scripted, profile: object, **options: object) -> Client:
        options.setdefault("headers", {"Authorization": "Bearer sk_test"})
        client = Client(
            store=store_path,
            clock=clock,
            transport=httpx.MockTransport(server),
            base_url="https://api.psp.test",
            profile=profile,  # type: ignore[arg-type]
            **options,  # type: ignore[arg-type]
        )
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()
