"""Which write a client asks for a call's final answer: a store's brief form of `finish`
(`finish_brief`) only where the store declares that it stands for the `finish` the
store has (`finish_brief_of = finish`, the optional part of `OperationStore`), else
`finish` itself. A third party's store opts in by declaring; a subclass that overrides
`finish`, or a `finish` replaced on the store itself (a user's wrapper, a test's
fault), is asked by that `finish`, never passed by for an inherited brief form.

Through `Client` and `AsyncClient`, with a scripted server; each store notes which of
its writes was asked."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, Outcome, State
from idemclient._store._base import Finished
from idemclient.store import MemoryStore, OperationRecord, SQLiteStore

WAYS = ("client", "async")


def _paid(store: Any, way: str, operation_id: str = "op-1") -> Outcome:
    """One payment through `way`, answered 201; its outcome."""
    options: dict[str, Any] = {"store": store, "base_url": "http://psp.test"}
    body = {"amount": 100, "currency": "EUR"}
    if way == "client":
        with Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(201, json={})),
            **options,
        ) as client:
            return client.post("/v1/payments", json=body, operation_id=operation_id)

    async def go() -> Outcome:
        async def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(201, json={})

        async with AsyncClient(transport=httpx.MockTransport(answer), **options) as client:
            return await client.post("/v1/payments", json=body, operation_id=operation_id)

    return asyncio.run(go())


def _paid_once(store: Any, way: str) -> None:
    """One payment through `way`: told succeeded, and stored so."""
    assert _paid(store, way).state is State.SUCCEEDED
    record = store.get("op-1")
    assert record is not None
    assert record.state is State.SUCCEEDED


class Noting(MemoryStore):
    """A third party's store with a brief form of its `finish` that it does not
    declare; each write notes its name."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def finish(self, operation_id: str, **kwargs: Any) -> OperationRecord:
        self.asked.append("finish")
        return super().finish(operation_id, **kwargs)

    def finish_brief(self, operation_id: str, **kwargs: Any) -> Finished | OperationRecord:
        self.asked.append("finish_brief")
        return super().finish(operation_id, **kwargs)


class Declared(Noting):
    """The same store, declaring its brief form."""

    finish_brief_of = Noting.finish


class WatchedDeclared(Declared):
    """A subclass of a declaring store that overrides `finish` and declares nothing."""

    def finish(self, operation_id: str, **kwargs: Any) -> OperationRecord:
        self.asked.append("watched")
        return super().finish(operation_id, **kwargs)


class WatchedSQLite(SQLiteStore):
    """A subclass of the SQLite store that overrides `finish` and declares nothing."""

    asked: list[str]

    def finish(self, operation_id: str, **kwargs: Any) -> OperationRecord:
        self.asked.append("watched")
        return super().finish(operation_id, **kwargs)


class RedeclaredSQLite(SQLiteStore):
    """A subclass of the SQLite store with a brief form of its own `finish`, declared."""

    asked: list[str]

    def finish(self, operation_id: str, **kwargs: Any) -> OperationRecord:
        self.asked.append("finish")
        return super().finish(operation_id, **kwargs)

    def finish_brief(self, operation_id: str, **kwargs: Any) -> Finished | OperationRecord:
        self.asked.append("finish_brief")
        return super().finish_brief(operation_id, **kwargs)

    finish_brief_of = finish


@pytest.mark.parametrize("way", WAYS)
def test_a_store_that_declares_its_brief_finish_is_asked_by_it(way: str) -> None:
    store = Declared()
    _paid_once(store, way)
    assert store.asked == ["finish_brief"]


@pytest.mark.parametrize("way", WAYS)
def test_a_brief_finish_the_store_does_not_declare_is_never_asked(way: str) -> None:
    store = Noting()
    _paid_once(store, way)
    assert store.asked == ["finish"]


@pytest.mark.parametrize("way", WAYS)
def test_a_subclass_overriding_finish_without_declaring_gets_its_own_finish(
    tmp_path: Path, way: str
) -> None:
    # Neither a third party's declaring store nor the SQLite store lends its brief
    # form to a subclass whose `finish` is another: the subclass's own is asked.
    memory = WatchedDeclared()
    _paid_once(memory, way)
    assert memory.asked == ["watched", "finish"]
    with WatchedSQLite(tmp_path / "watched.db") as sqlite:
        sqlite.asked = []
        _paid_once(sqlite, way)
        assert sqlite.asked == ["watched"]


@pytest.mark.parametrize("way", WAYS)
def test_a_subclass_that_declares_again_is_asked_by_its_own_brief_finish(
    tmp_path: Path, way: str
) -> None:
    with RedeclaredSQLite(tmp_path / "again.db") as store:
        store.asked = []
        _paid_once(store, way)
        assert store.asked == ["finish_brief"]


@pytest.mark.parametrize("way", WAYS)
def test_a_finish_replaced_on_the_store_itself_is_asked(tmp_path: Path, way: str) -> None:
    # A user's wrapper set on the store object (to watch, time or change its writes)
    # is the store's `finish` now: the brief form declared for the class's is not it.
    asked: list[str] = []
    with SQLiteStore(tmp_path / "s.db") as store:
        finish = store.finish

        def watched(operation_id: str, **kwargs: Any) -> OperationRecord:
            asked.append(operation_id)
            return finish(operation_id, **kwargs)

        store.finish = watched  # type: ignore[method-assign]
        _paid_once(store, way)
        assert asked == ["op-1"]
