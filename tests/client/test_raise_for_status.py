"""`Outcome.raise_for_status()`: a caller says "raise unless it succeeded" in one call, as
with httpx's responses, and the errors it meets name the classes it imports.

Against the reference server in-process, the money checked on its ledger."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

import idemclient
import idemclient.batch
import idemclient.inbox
from idemclient import AsyncClient, Client, ManualClock, Outcome, RetryPolicy, State
from idemclient.errors import OperationFailed
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer() as server:
        yield server


@pytest.fixture
def psp(server: ReferenceServer, tmp_path: Path) -> Iterator[Client]:
    with Client(
        base_url="https://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer sk_test_merchant"},
        store=tmp_path / "payments.db",
        clock=ManualClock(),
        policy=RetryPolicy(max_attempts=3),
    ) as psp:
        yield psp


def _named(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).strip()


def test_a_success_is_returned_for_chaining(psp: Client, server: ReferenceServer) -> None:
    outcome = psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert outcome.raise_for_status() is outcome
    payment_id = (
        psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        .raise_for_status()
        .json()["id"]
    )
    assert payment_id == outcome.json()["id"]
    assert len(server.ledger()) == 1


def test_a_decline_raises_the_library_error_carrying_the_outcome(
    psp: Client, server: ReferenceServer
) -> None:
    server.external_fault(1, "decline")
    outcome = psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    # The client returns a refusal (it is a final answer), and reading it as a payment
    # is the caller's choice: raise_for_status() refuses to.
    assert outcome.state is State.FAILED
    assert outcome.status_code == 402
    with pytest.raises(OperationFailed) as raised:
        outcome.raise_for_status()
    error = raised.value
    assert isinstance(error, idemclient.OutcomeError)
    assert error.outcome is outcome
    assert error.response is outcome.response
    assert error.key == outcome.key
    assert _named(error).startswith("idemclient.errors.OperationFailed: operation 'order-1042'")
    assert "402" in str(error)
    # Issued again, the stored refusal comes back and raises the same way: never a payment.
    again = psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with pytest.raises(OperationFailed):
        again.raise_for_status()
    assert all(entry.status != "succeeded" for entry in server.ledger())


def test_an_outcome_without_a_final_answer_raises_what_the_client_raises(
    psp: Client, server: ReferenceServer
) -> None:
    server.drop(times=3)  # applied, and the answer never arrives
    with pytest.raises(idemclient.Indeterminate) as raised:
        psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    stored = psp.operation("order-1042")
    assert stored is not None
    assert stored.state is State.INDETERMINATE
    with pytest.raises(idemclient.Indeterminate) as again:
        stored.raise_for_status()
    assert again.value.outcome is stored
    assert not isinstance(again.value, OperationFailed)  # maybe charged is never "failed"
    assert "indeterminate" in str(again.value)
    assert _named(raised.value).startswith("idemclient.errors.Indeterminate: ")


def test_after_503s_not_sent_says_the_server_answered_and_applied_nothing(
    psp: Client, server: ReferenceServer
) -> None:
    server.answer(503, times=3)
    with pytest.raises(idemclient.NotSent) as raised:
        psp.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    message = str(raised.value)
    assert "not sent" in message
    assert "not_sent" not in message
    assert "Nothing reached the server" not in message
    assert "The server answered (HTTP 503) and applied nothing" in message
    assert _named(raised.value).startswith("idemclient.errors.NotSent: ")
    stored = psp.operation("order-1042")
    assert stored is not None
    with pytest.raises(idemclient.NotSent, match="not sent after 3 attempt"):
        stored.raise_for_status()
    assert server.ledger() == ()


def test_a_key_conflict_from_the_store_raises_key_conflict() -> None:
    outcome = Outcome("order-1042", "k-1", State.FAILED, 1, last_status=422, key_conflict=True)
    with pytest.raises(idemclient.KeyConflict, match="different request"):
        outcome.raise_for_status()


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
def test_a_missing_store_names_the_class_the_caller_called(client_class: type) -> None:
    with pytest.raises(TypeError) as raised:
        client_class(base_url="https://psp.test")
    assert str(raised.value) == (
        f"{client_class.__name__}() missing 1 required keyword-only argument: 'store'"
    )


def test_public_errors_name_their_public_module() -> None:
    assert idemclient.Indeterminate.__module__ == "idemclient.errors"
    assert idemclient.errors.StoreCorrupt.__module__ == "idemclient.errors"
    assert idemclient.batch.BatchInvalid.__module__ == "idemclient.batch"
    assert idemclient.inbox.SignatureInvalid.__module__ == "idemclient.inbox"
