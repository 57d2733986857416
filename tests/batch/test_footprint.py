"""What a run holds for each row once it has registered them: a hundred thousand rows are
held as a hundred thousand small records, not as requests, bodies or copies of the
row's ids (the batch's peak memory, docs/performance.md). Structure, never a size or a
time: what is held, not how much it weighs on this machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock
from idemclient.batch import Batch
from idemclient.batch import _sender as sender_module
from idemclient.batch._identity import RowIdentity
from idemclient.batch._run import _Row, make_run
from idemclient.store import SQLiteStore


def make_batch(n: int) -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(n)
        ],
        reference="2026-11",
    )


def registered(tmp_path: Path, rows: int) -> tuple[list[_Row], SQLiteStore]:
    """A run of `rows` new rows, planned and registered; nothing sent."""
    store = SQLiteStore(tmp_path / "ops.db")
    nothing = httpx.MockTransport(lambda _request: pytest.fail("nothing is sent"))
    with Client(
        base_url="http://psp.test",
        headers={"Authorization": "Bearer t"},
        store=store,
        transport=nothing,
        clock=ManualClock(),
    ) as client:
        run = make_run(make_batch(rows), client, lookup=None)
        run.plan()
        to_send = run.record()
    assert [item.index for item in to_send] == list(range(rows))
    return run.rows, store


def test_a_registered_row_holds_no_request_body_or_intent(tmp_path: Path) -> None:
    rows, store = registered(tmp_path, 40)
    for item in rows:
        # Its intent is made again when it is sent, as it was registered.
        assert item.outgoing is None
        assert item.asked is None
        held = [getattr(item, name) for name in _Row.__slots__]
        held += [getattr(item.identity, name) for name in RowIdentity.__slots__]
        assert not any(isinstance(value, bytes | httpx.Request) for value in held)
    # Every new row shares one plan.
    assert len({id(item.plan) for item in rows}) == 1
    # What the store holds is the row's request all the same.
    record = store.get(rows[0].identity.operation_id)
    assert record is not None
    assert b'"reference":"2026-11/E0000"' in record.body


@pytest.mark.parametrize("kind", [_Row, RowIdentity])
def test_the_per_row_records_have_slots_and_keep_no_derived_id(kind: type) -> None:
    assert kind.__dictoffset__ == 0  # no instance dictionary: slots only
    # The operation id is made from the operation and the reference when asked.
    assert "operation_id" not in {field.name for field in dataclasses.fields(kind)}


def test_the_credentials_digest_and_url_are_made_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marked: list[str] = []
    mark = sender_module.Sender.mark

    def counted(self: sender_module.Sender, url: str) -> str:
        marked.append(url)
        return mark(self, url)

    monkeypatch.setattr(sender_module.Sender, "mark", counted)
    rows, store = registered(tmp_path, 25)
    assert len(marked) == 1
    urls = {
        record.url for record in store.find(operation_ids=[r.identity.operation_id for r in rows])
    }
    (url,) = urls
    assert "#" in url  # every row recorded with the credentials' mark
