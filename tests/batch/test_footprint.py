"""What a run holds for each row between its phases: one byte (where the row is), its
report line on disk, and a chunk of rows at a time, never a request, a body, a record
or a copy of the row's ids per row (the batch's peak memory, docs/performance.md).
Structure, never a size or a time: what is held, not how much it weighs on this
machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, State
from idemclient.batch import Batch
from idemclient.batch import _sender as sender_module
from idemclient.batch._identity import RowIdentity, identify
from idemclient.batch._run import _Run, make_run, run_sync
from idemclient.batch._run_rows import CHUNK, RunRow
from idemclient.store import SQLiteStore


def make_batch(n: int) -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(n)
        ],
        reference="2026-11",
    )


def registered(tmp_path: Path, rows: int) -> tuple[_Run, SQLiteStore]:
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
        run.record()
    return run, store


def operation_ids(run: _Run) -> list[str]:
    batch = run.batch
    return [
        identify(
            row, scope=batch.scope, operation="payout", namespace=run.target.namespace
        ).operation_id
        for row in batch.rows
    ]


def test_a_run_holds_a_byte_a_row_between_its_phases(tmp_path: Path) -> None:
    rows = 2 * CHUNK + 500  # more than one chunk
    run, store = registered(tmp_path, rows)
    assert bytes(run.status) == bytes([5]) * rows  # every row new, registered: to send
    # Nothing else it keeps grows with the rows: no list, set or mapping of them.
    sizes = {
        name: len(value)
        for name in dir(run)
        if not name.startswith("__")
        and name not in ("batch", "status")
        and isinstance(value := getattr(run, name), list | tuple | set | dict | bytearray)
    }
    assert all(size < CHUNK for size in sizes.values()), sizes
    # What the store holds is each row's request all the same.
    record = store.get(operation_ids(run)[0])
    assert record is not None
    assert b'"reference":"2026-11/E0000"' in record.body
    assert len(store.find(operation_ids=operation_ids(run))) == rows


def test_the_rows_a_run_sends_are_made_a_chunk_at_a_time(tmp_path: Path) -> None:
    rows = CHUNK + 10
    run, _store = registered(tmp_path, rows)
    feed = run.sendings()
    first = feed.next_chunk()
    assert len(first) == CHUNK  # one chunk, not every row
    for item in first:
        # A new row's intent is made again when it is sent, as it was registered.
        assert item.outgoing is None
        assert item.asked is None
        held = [getattr(item, name) for name in RunRow.__slots__]
        held += [getattr(item.identity, name) for name in RowIdentity.__slots__]
        assert not any(isinstance(value, bytes | httpx.Request) for value in held)
    assert len({id(item.plan) for item in first}) == 1  # every new row shares one plan
    assert len(feed.next_chunk()) == 10
    assert feed.next_chunk() == []


@pytest.mark.parametrize("kind", [RunRow, RowIdentity])
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
    run, store = registered(tmp_path, 25)
    assert len(marked) == 1
    urls = {record.url for record in store.find(operation_ids=operation_ids(run))}
    (url,) = urls
    assert "#" in url  # every row recorded with the credentials' mark


def test_a_run_stopped_while_planning_stops_between_chunks(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ops.db")
    nothing = httpx.MockTransport(lambda _request: pytest.fail("nothing is sent"))
    with Client(
        base_url="http://psp.test",
        headers={"Authorization": "Bearer t"},
        store=store,
        transport=nothing,
        clock=ManualClock(),
    ) as client:
        run = make_run(make_batch(3 * CHUNK), client)
        find = store.find

        def stopping(**asked: object) -> object:
            run.stop()  # Ctrl-C while the first chunk is planned
            return find(**asked)  # type: ignore[arg-type]

        store.find = stopping  # type: ignore[method-assign]
        report = run_sync(run, client.http)
        store.find = find  # type: ignore[method-assign]
        assert report.interrupted
        assert bytes(run.status[CHUNK:]) == bytes(2 * CHUNK)  # never planned
        reasons = {line.reason for line in report.rows[CHUNK:]}
        assert reasons == {"not sent: interrupted before it was recorded"}
        assert len(report.rows) == 3 * CHUNK
        assert store.counts()[State.PENDING] == 0  # nothing recorded
        run.close()
