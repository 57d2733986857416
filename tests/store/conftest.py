from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient._fingerprint import fingerprint
from idemclient._store import Intent
from idemclient.store import SQLiteStore

NOW = 1_800_000_000.0


def make_intent(
    operation_id: str = "op-1",
    key: str = "key-1",
    body: bytes = b'{"amount":100}',
    *,
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),),
    key_given: bool = True,
    url: str = "http://psp.test/v1/payments",
) -> Intent:
    import httpx

    parsed = httpx.URL(url)
    return Intent(
        operation_id=operation_id,
        key=key,
        key_given=key_given,
        method="POST",
        url=str(parsed),
        headers=headers,
        body=body,
        fingerprint=fingerprint("POST", parsed, body),
        reference="ref-1",
    )


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "ops.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(store_path) as opened:
        yield opened
