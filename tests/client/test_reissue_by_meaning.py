"""Two requests that mean the same thing are the same request: an operation issued again
by its id with a body of the same meaning (an upload whose multipart boundary httpx drew
anew, a JSON body with its members in another order, a form with its fields in another
order) is that operation, with its key, paid once; a body of another meaning is still
refused before anything is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, RetryPolicy, State
from idemclient.errors import OperationMismatch
from idemclient.testing import ReferenceServer
from tests.support.upload_psp import FileUploadPSP

AUTH = {"Authorization": "Bearer merchant-1"}
#: One attempt: an attempt whose answer is lost ends the call indeterminate.
ONCE = RetryPolicy(max_attempts=1)


@pytest.fixture
def psp(tmp_path: Path) -> FileUploadPSP:
    return FileUploadPSP(tmp_path / "psp")


@pytest.fixture
def client(tmp_path: Path, psp: FileUploadPSP) -> Iterator[Client]:
    with Client(
        store=tmp_path / "client.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handle),
        base_url="https://psp.test",
        headers=AUTH,
        policy=ONCE,
    ) as opened:
        yield opened


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    path = tmp_path / "receipt.pdf"
    path.write_bytes(b"%PDF-1.7 " + bytes(range(256)) * 40)
    return path


def _upload(client: Client, evidence: Path, **options: Any) -> Any:
    with evidence.open("rb") as file:
        return client.post(
            "/v1/files",
            data={"purpose": "dispute_evidence"},
            files={"file": (evidence.name, file, "application/pdf")},
            operation_id="evidence-7",
            **options,
        )


def test_an_upload_whose_answer_was_lost_is_issued_again_by_its_id_and_applied_once(
    client: Client, psp: FileUploadPSP, evidence: Path
) -> None:
    psp.drop_next()
    with pytest.raises(Indeterminate) as lost:
        _upload(client, evidence)
    outcome = _upload(client, evidence)  # a new boundary: other bytes, the same upload
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert outcome.key == lost.value.outcome.key
    assert len(psp.effects()) == 1
    # Finished: issued once more, it is answered from the store, nothing sent.
    assert _upload(client, evidence).state is State.SUCCEEDED
    assert psp.sent() == 2


def test_an_upload_of_other_content_under_its_id_is_refused_before_anything_is_sent(
    client: Client, psp: FileUploadPSP, evidence: Path, tmp_path: Path
) -> None:
    psp.drop_next()
    with pytest.raises(Indeterminate):
        _upload(client, evidence)
    other = tmp_path / "other" / evidence.name
    other.parent.mkdir()
    other.write_bytes(evidence.read_bytes()[:-1] + b"!")
    with pytest.raises(OperationMismatch, match="its body"):
        _upload(client, other)
    with pytest.raises(OperationMismatch), evidence.open("rb") as file:
        client.post(  # the same bytes under another filename
            "/v1/files",
            data={"purpose": "dispute_evidence"},
            files={"file": ("receipt-2.pdf", file, "application/pdf")},
            operation_id="evidence-7",
        )
    with pytest.raises(OperationMismatch), evidence.open("rb") as file:  # another purpose
        client.post(
            "/v1/files",
            data={"purpose": "identity_document"},
            files={"file": (evidence.name, file, "application/pdf")},
            operation_id="evidence-7",
        )
    assert psp.sent() == 1
    assert len(psp.effects()) == 1


def test_a_form_is_the_same_request_with_its_fields_in_another_order(
    client: Client, psp: FileUploadPSP
) -> None:
    psp.drop_next()
    with pytest.raises(Indeterminate):
        client.post("/v1/refunds", data={"charge": "ch_1", "note": "a b"}, operation_id="r-1")
    outcome = client.post(
        "/v1/refunds",
        content=b"note=a%20b&charge=ch_1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        operation_id="r-1",
    )
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert len(psp.effects()) == 1
    with pytest.raises(OperationMismatch):
        client.post("/v1/refunds", data={"charge": "ch_2", "note": "a b"}, operation_id="r-1")


def test_a_json_body_is_its_value_and_the_reference_server_pays_it_once(tmp_path: Path) -> None:
    clock = ManualClock()
    server = ReferenceServer(clock=clock)
    with (
        server,
        Client(
            store=tmp_path / "client.db",
            clock=clock,
            transport=server.transport,
            base_url="http://psp.test",
            headers=AUTH,
            policy=ONCE,
        ) as client,
    ):
        server.drop(path="/v1/payments")
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments",
                content=b'{"amount": 1250,\n "currency": "EUR", "reference": "inv-1"}',
                headers={"Content-Type": "application/json"},
                operation_id="order-1",
            )
        again = {"reference": "inv-1", "currency": "EUR", "amount": 1250}
        outcome = client.post("/v1/payments", json=again, operation_id="order-1")
        assert outcome.state is State.SUCCEEDED
        assert outcome.replayed
        with pytest.raises(OperationMismatch, match="its body"):
            client.post("/v1/payments", json={**again, "amount": 1251}, operation_id="order-1")
        assert len(server.ledger()) == 1


@pytest.mark.anyio
async def test_the_async_client_issues_an_upload_again_by_its_id(
    tmp_path: Path, psp: FileUploadPSP, evidence: Path
) -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        await request.aread()
        return psp.handle(request)

    async with AsyncClient(
        store=tmp_path / "async.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(handle),
        base_url="https://psp.test",
        headers=AUTH,
        policy=ONCE,
    ) as client:
        psp.drop_next()
        files = {"file": (evidence.name, evidence.read_bytes(), "application/pdf")}
        with pytest.raises(Indeterminate):
            await client.post("/v1/files", files=files, operation_id="evidence-8")
        outcome = await client.post("/v1/files", files=files, operation_id="evidence-8")
    assert outcome.state is State.SUCCEEDED
    assert outcome.replayed
    assert len(psp.effects()) == 1
