"""An operation issued again with a body of the same meaning in other bytes (JSON
members in another order, a new multipart boundary) is sent with the bytes and the
`Content-Type` it was recorded with, as `resume()` sends it: a server that tells
requests apart by their payload's checksum (the IETF draft allows it) answers for the
request it saw first, and pays once.

Where an auth flow or a request hook may read the body (one that signs it), the bytes
are put in before it runs, so that it signs the bytes sent; where nothing above the
transport reads them, the transport puts them in. Under `Client`, `AsyncClient` and
`wrap()` alike. If the bytes a signing flow read could not be the recorded ones (the
operation recorded by another process meanwhile), nothing is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    OutcomeError,
    RetryPolicy,
    State,
    outcome_of,
    wrap,
)
from idemclient.errors import OperationMismatch

ONCE = RetryPolicy(max_attempts=1)
SECRET = b"merchant-signing-secret"
PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
#: the same payment, its members in another order: other bytes, the same meaning
REORDERED = {"reference": "order-1042", "currency": "EUR", "amount": 1999}


def signature(body: bytes) -> str:
    return hmac.new(SECRET, body, hashlib.sha256).hexdigest()


class SignedChecksumServer:
    """A PSP after the IETF draft whose fingerprint is the payload's checksum (a finished
    key's answer replayed; the same key with another payload 422), which checks a
    signature over the body (`X-Signature`, when `signed`) and can break the connection
    right after applying a request."""

    def __init__(self, *, signed: bool = False) -> None:
        self.signed = signed
        self.records: dict[str, tuple[str, httpx.Response]] = {}
        self.ledger: list[bytes] = []
        self.seen: list[httpx.Request] = []
        self.drop_next = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client asking the server's time
            return httpx.Response(200)
        self.seen.append(request)
        body = request.read()
        if self.signed and request.headers.get("x-signature") != signature(body):
            return httpx.Response(401, json={"title": "the signature is not the body's"})
        key = request.headers.get("idempotency-key")
        if key is None:
            return httpx.Response(400, json={"title": "Idempotency-Key is missing"})
        checksum = hashlib.sha256(body).hexdigest()
        found = self.records.get(key)
        if found is not None:
            if found[0] != checksum:
                return httpx.Response(422, json={"title": "the key is used for another payload"})
            return found[1]
        self.ledger.append(body)
        answer = httpx.Response(201, json={"id": f"pay_{len(self.ledger)}", "status": "paid"})
        self.records[key] = (checksum, answer)
        if self.drop_next:
            self.drop_next = False
            raise httpx.ReadError("the connection broke after it was applied", request=request)
        return answer


class SigningAuth(httpx.Auth):
    """Signs the body it is given (it says it reads it, as httpx asks)."""

    requires_request_body = True

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["X-Signature"] = signature(request.content)
        yield request


def sign_in_a_function(request: httpx.Request) -> httpx.Request:
    """A signing auth given as a plain function (httpx's `FunctionAuth`)."""
    request.headers["X-Signature"] = signature(request.read())
    return request


def sign_in_a_hook(request: httpx.Request) -> None:
    """A signing request event hook."""
    request.headers["X-Signature"] = signature(request.read())


def _state(call: Callable[[], Any]) -> State:
    try:
        answer = call()
    except OutcomeError as exc:
        return exc.outcome.state
    outcome = answer if not isinstance(answer, httpx.Response) else outcome_of(answer)
    assert outcome is not None
    return outcome.state


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    path = tmp_path / "receipt.pdf"
    path.write_bytes(b"%PDF-1.7 " + bytes(range(256)) * 8)
    return path


# -- nothing above the transport reads the body: the transport puts the bytes in --------


def test_a_wrapped_client_sends_a_reordered_body_as_it_was_recorded(tmp_path: Path) -> None:
    server = SignedChecksumServer()
    server.drop_next = True
    with wrap(
        httpx.Client(transport=httpx.MockTransport(server.handle), base_url="https://psp.test"),
        store=tmp_path / "w.db",
        clock=ManualClock(),
        profile="ietf",
        policy=ONCE,
    ) as http:
        key = {"Idempotency-Key": '"order-1042"'}
        with pytest.raises(Indeterminate):
            http.post("/v1/payments", json=PAYMENT, headers=key)
        again = http.post("/v1/payments", json=REORDERED, headers=key)
    assert (again.status_code, _state(lambda: again)) == (201, State.SUCCEEDED)
    assert len(server.ledger) == 1
    assert [r.content for r in server.seen] == [server.ledger[0]] * 2
    assert again.request.content == server.ledger[0]  # the request httpx reports is it


def test_an_upload_is_sent_again_with_its_recorded_boundary(tmp_path: Path, evidence: Path) -> None:
    server = SignedChecksumServer()
    server.drop_next = True

    def upload(client: Client) -> State:
        with evidence.open("rb") as file:
            return _state(
                lambda: client.post(
                    "/v1/files",
                    data={"purpose": "dispute_evidence"},
                    files={"file": (evidence.name, file, "application/pdf")},
                    operation_id="evidence-7",
                )
            )

    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        profile="ietf",
        policy=ONCE,
    ) as client:
        assert upload(client) is State.INDETERMINATE
        assert upload(client) is State.SUCCEEDED
    first, again = server.seen
    assert again.headers["content-type"] == first.headers["content-type"]  # its boundary
    assert again.content == first.content
    assert again.headers["content-length"] == str(len(first.content))
    assert len(server.ledger) == 1


def test_another_meaning_is_still_refused_before_anything_is_sent(tmp_path: Path) -> None:
    server = SignedChecksumServer(signed=True)
    server.drop_next = True
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        auth=SigningAuth(),
        policy=ONCE,
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        for auth in (SigningAuth(), None):  # the bytes put in before the flow, or after
            with pytest.raises(OperationMismatch, match="its body"):
                client.post(
                    "/v1/payments",
                    json={**REORDERED, "amount": 2000},
                    operation_id="order-1042",
                    auth=auth,
                )
    assert len(server.seen) == 1
    assert len(server.ledger) == 1


# -- an auth flow or a hook that signs the body signs the recorded bytes ------------------


SIGNERS: dict[str, dict[str, Any]] = {
    "an httpx.Auth": {"auth": SigningAuth()},
    "a function": {"auth": sign_in_a_function},
    "a request hook": {"event_hooks": {"request": [sign_in_a_hook]}},
}


@pytest.mark.parametrize("signer", SIGNERS.values(), ids=SIGNERS.keys())
def test_a_signing_client_signs_the_bytes_it_sends_again(
    tmp_path: Path, signer: dict[str, Any]
) -> None:
    server = SignedChecksumServer(signed=True)
    server.drop_next = True
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        policy=ONCE,
        **signer,
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
        again = _state(
            lambda: client.post("/v1/payments", json=REORDERED, operation_id="order-1042")
        )
    assert again is State.SUCCEEDED
    assert len(server.ledger) == 1
    assert [r.content for r in server.seen] == [server.ledger[0]] * 2


@pytest.mark.parametrize("signer", SIGNERS.values(), ids=SIGNERS.keys())
def test_a_wrapped_signing_client_signs_the_bytes_it_sends_again(
    tmp_path: Path, signer: dict[str, Any]
) -> None:
    server = SignedChecksumServer(signed=True)
    server.drop_next = True
    http = httpx.Client(
        transport=httpx.MockTransport(server.handle), base_url="https://psp.test", **signer
    )
    with wrap(http, store=tmp_path / "w.db", clock=ManualClock(), policy=ONCE):
        key = {"Idempotency-Key": "order-1042"}
        with pytest.raises(Indeterminate):
            http.post("/v1/payments", json=PAYMENT, headers=key)
        again = http.post("/v1/payments", json=REORDERED, headers=key)
    assert again.status_code == 201
    assert len(server.ledger) == 1


def test_an_async_client_signs_the_upload_it_sends_again(tmp_path: Path, evidence: Path) -> None:
    server = SignedChecksumServer(signed=True)
    server.drop_next = True

    async def upload(client: AsyncClient) -> State:
        with evidence.open("rb") as file:
            try:
                outcome = await client.post(
                    "/v1/files",
                    data={"purpose": "dispute_evidence"},
                    files={"file": (evidence.name, file, "application/pdf")},
                    operation_id="evidence-7",
                )
            except OutcomeError as exc:
                return exc.outcome.state
            return outcome.state

    async def main() -> list[State]:
        async with AsyncClient(
            store=tmp_path / "a.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(server.handle),
            base_url="https://psp.test",
            auth=SigningAuth(),
            policy=ONCE,
        ) as client:
            return [await upload(client), await upload(client)]

    assert asyncio.run(main()) == [State.INDETERMINATE, State.SUCCEEDED]
    assert len(server.ledger) == 1
    first, again = server.seen
    assert (again.headers["content-type"], again.content) == (
        first.headers["content-type"],
        first.content,
    )


def test_a_streamed_body_is_read_before_a_signing_flow_and_sent_as_recorded(
    tmp_path: Path,
) -> None:
    server = SignedChecksumServer(signed=True)
    server.drop_next = True

    def chunks(payment: dict[str, Any]) -> Iterator[bytes]:
        text = json.dumps(payment).encode()
        yield text[:10]
        yield text[10:]

    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        auth=SigningAuth(),
        policy=ONCE,
    ) as client:
        json_type = {"Content-Type": "application/json"}
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments", content=chunks(PAYMENT), headers=json_type, operation_id="o-1"
            )
        again = _state(
            lambda: client.post(
                "/v1/payments", content=chunks(REORDERED), headers=json_type, operation_id="o-1"
            )
        )
    assert again is State.SUCCEEDED
    assert len(server.ledger) == 1


# -- the bytes a signing flow read cannot be the recorded ones: nothing is sent -----------


def test_an_operation_recorded_meanwhile_by_another_process_is_not_sent_under_a_stale_signature(
    tmp_path: Path,
) -> None:
    """The client reads the store before its signing flow runs and finds no operation;
    while the flow signs, another process (a second client on the same store) records
    it with the other bytes and loses its answer. Sent now, the request would carry a
    signature over bytes that are not the recorded ones: nothing is sent, the record
    stays as it was, and issued again the operation is paid once."""
    server = SignedChecksumServer(signed=True)
    store = tmp_path / "c.db"
    clock = ManualClock()

    def other_process() -> None:
        server.drop_next = True
        with (
            Client(
                store=store,
                clock=clock,
                transport=httpx.MockTransport(server.handle),
                base_url="https://psp.test",
                auth=SigningAuth(),
                policy=ONCE,
            ) as other,
            pytest.raises(Indeterminate),
        ):
            other.post("/v1/payments", json=PAYMENT, operation_id="order-1042")

    class SigningWhileAnotherRecords(SigningAuth):
        def __init__(self) -> None:
            self.first = True

        def auth_flow(
            self, request: httpx.Request
        ) -> Generator[httpx.Request, httpx.Response, None]:
            if self.first:
                self.first = False
                other_process()
            yield from super().auth_flow(request)

    with Client(
        store=store,
        clock=clock,
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        auth=SigningWhileAnotherRecords(),
        policy=ONCE,
    ) as client:
        with pytest.raises(OperationMismatch, match="resume"):
            client.post("/v1/payments", json=REORDERED, operation_id="order-1042")
        assert len(server.seen) == 1  # the other process's attempt only
        record = client.store.get("order-1042")
        assert record is not None
        assert record.state is State.INDETERMINATE
        assert record.lease_owner is None  # given back
        assert record.body == server.ledger[0]
        again = _state(
            lambda: client.post("/v1/payments", json=REORDERED, operation_id="order-1042")
        )
    assert again is State.SUCCEEDED
    assert len(server.ledger) == 1


# -- a Content-Type given twice: sent again as it was recorded, as the fingerprint read it --

#: the content type given twice; the fingerprint reads the last (JSON, by its meaning)
TWO_TYPES = [("Content-Type", "text/plain"), ("Content-Type", "application/json")]


def _types(request: httpx.Request) -> list[str]:
    return request.headers.get_list("content-type")


@pytest.mark.parametrize("signer", [{}, *SIGNERS.values()], ids=["none", *SIGNERS.keys()])
def test_a_content_type_given_twice_is_sent_again_as_recorded(
    tmp_path: Path, signer: dict[str, Any]
) -> None:
    """The fingerprint reads the last of a repeated Content-Type (here JSON, so the
    reordered members are the same operation): the re-issue carries the recorded bytes
    with the content types they were recorded with, both, in their order, not the
    first alone (which reads as text, another request by the fingerprint's rule)."""
    server = SignedChecksumServer(signed=bool(signer))
    server.drop_next = True
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        policy=ONCE,
        **signer,
    ) as client:
        for payment in (PAYMENT, REORDERED):
            state = _state(
                lambda payment=payment: client.post(
                    "/v1/payments",
                    content=json.dumps(payment).encode(),
                    headers=TWO_TYPES,
                    operation_id="order-1042",
                )
            )
        assert state is State.SUCCEEDED
    first, again = server.seen
    assert _types(first) == _types(again) == ["text/plain", "application/json"]
    assert again.content == first.content
    assert len(server.ledger) == 1


def test_a_streamed_body_with_a_content_type_given_twice_keeps_both(tmp_path: Path) -> None:
    """A streamed body read before a signing flow (its bytes the recorded ones) keeps
    its content types as they were given, not joined into one value (which no longer
    reads as JSON, and so as another request)."""
    server = SignedChecksumServer(signed=True)
    server.drop_next = True

    def chunks() -> Iterator[bytes]:
        text = json.dumps(PAYMENT).encode()
        yield text[:10]
        yield text[10:]

    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://psp.test",
        auth=SigningAuth(),
        policy=ONCE,
    ) as client:
        states = [
            _state(
                lambda: client.post(
                    "/v1/payments", content=chunks(), headers=TWO_TYPES, operation_id="o-1"
                )
            )
            for _ in range(2)
        ]
    assert states == [State.INDETERMINATE, State.SUCCEEDED]
    first, again = server.seen
    assert _types(first) == _types(again) == ["text/plain", "application/json"]
    assert len(server.ledger) == 1
