"""A client runs on any store that offers the client's part of the interface
(`OperationStore`): the in-memory store, or a third party's with nothing more. What
needs more (a batch, `resume(origin=...)`) says so before anything is recorded or sent.
Exactly once is asserted on the reference server's ledger."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import httpx
import pytest

from idemclient import Client, ManualClock, NotSent, RetryPolicy, State, resume
from idemclient.batch import Batch, submit
from idemclient.store import (
    Begin,
    Intent,
    MemoryStore,
    OperationRecord,
    OperationStore,
    Progress,
    ServerTime,
    StoredResponse,
)
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


class ClientPartOnly:
    """A third party's store with the client's part of the interface and nothing more
    (kept in memory here: the part is what matters)."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    @property
    def path(self) -> str:
        return "client-part-only"

    def close(self) -> None:
        self._inner.close()

    def get(self, operation_id: str) -> OperationRecord | None:
        return self._inner.get(operation_id)

    def find(
        self, *, operation_ids: Iterable[str] = (), references: Iterable[str] = ()
    ) -> Sequence[OperationRecord]:
        return self._inner.find(operation_ids=operation_ids, references=references)

    def unfinished(self, *, limit: int | None = None) -> Sequence[OperationRecord]:
        return self._inner.unfinished(limit=limit)

    def begin(self, intent: Intent, *, owner: str, now: float, lease_until: float) -> Begin:
        return self._inner.begin(intent, owner=owner, now=now, lease_until=lease_until)

    def claim(
        self,
        operation_id: str,
        *,
        owner: str,
        now: float,
        lease_until: float,
        look_up: bool = False,
        server_time: ServerTime | None = None,
    ) -> Begin:
        return self._inner.claim(
            operation_id,
            owner=owner,
            now=now,
            lease_until=lease_until,
            look_up=look_up,
            server_time=server_time,
        )

    def record_attempt(
        self, operation_id: str, *, owner: str, progress: Progress, lease_until: float
    ) -> bool:
        return self._inner.record_attempt(
            operation_id, owner=owner, progress=progress, lease_until=lease_until
        )

    def finish(
        self,
        operation_id: str,
        *,
        owner: str,
        state: State,
        progress: Progress,
        response: StoredResponse | None = None,
        known: OperationRecord | None = None,
        drop_answer: bool = False,
    ) -> OperationRecord:
        return self._inner.finish(
            operation_id,
            owner=owner,
            state=state,
            progress=progress,
            response=response,
            known=known,
            drop_answer=drop_answer,
        )

    def settle(
        self,
        operation_id: str,
        *,
        owner: str,
        applied: bool,
        evidence: str,
        now: float,
        response: StoredResponse | None = None,
        state: State = State.SUCCEEDED,
    ) -> OperationRecord:
        return self._inner.settle(
            operation_id,
            owner=owner,
            applied=applied,
            evidence=evidence,
            now=now,
            response=response,
            state=state,
        )

    def advance_clock(self, *, now: float) -> float:
        return self._inner.advance_clock(now=now)

    def clock_went_back(self, *, step: float, now: float) -> int:
        return self._inner.clock_went_back(step=step, now=now)


def psp(server: ReferenceServer, store: OperationStore) -> Client:
    return Client(
        base_url="https://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer sk_test_merchant"},
        store=store,
        clock=ManualClock(),
        policy=RetryPolicy(max_attempts=3),
    )


@pytest.mark.parametrize("make", [MemoryStore, ClientPartOnly], ids=["memory", "client-part"])
def test_a_payment_issued_twice_is_paid_once_on_a_store_of_the_clients_part(
    make: type[OperationStore],
) -> None:
    store = make()
    with ReferenceServer() as server, psp(server, store) as client:
        first = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        again = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        assert len(server.ledger()) == 1
    assert (first.state, again.state) == (State.SUCCEEDED, State.SUCCEEDED)
    assert again.from_store  # answered from the store: nothing sent again
    assert again.json() == first.json()


def test_what_needs_the_whole_interface_says_so_and_sends_nothing() -> None:
    store = ClientPartOnly()
    batch = Batch.from_records(
        [{"ref": "E1", "amount": "1000", "currency": "EUR", "value_date": "2026-11-30"}]
    )
    with ReferenceServer() as server, psp(server, store) as client:
        with pytest.raises(TypeError, match=r"a batch needs .*AdminStore.* lacks .*register"):
            submit(batch, client)
        assert not server.ledger()

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with Client(
        base_url="https://psp.test",
        transport=httpx.MockTransport(down),
        store=store,
        clock=ManualClock(),
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        with pytest.raises(NotSent):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        # Moving it to another origin needs `move`: refused, naming what is missing.
        with pytest.raises(TypeError, match=r"resume\(origin=...\).* lacks .*move"):
            resume(client.http, origin="https://psp-eu.test")
    record = store.get("order-1042")
    assert record is not None
    assert (record.state, record.url) == (State.NOT_SENT, "https://psp.test/v1/payments")
