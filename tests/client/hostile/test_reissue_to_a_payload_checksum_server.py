"""An operation issued again by its id with a body of the same meaning but other bytes
(an upload, whose multipart boundary httpx draws anew; a JSON body built with its
members in another order) is that operation: the client sends it under the same key.
The IETF draft (-06, "Idempotency Fingerprint") lets a server tell two requests under
one key apart by "a checksum of the entire request payload": to such a server the other
bytes are another request, refused 422 whatever became of the first. That refusal says
nothing of the payment the first attempt may have made: it is never the operation's
final answer (state failed, KeyConflict "a client bug"), which an application reads as
"nothing was paid, use a new id", and pays again.

What holds: the request sent again is the one the server saw first (its bytes, its
content type), so the server answers for the first request; or, failing that, the
operation stays maybe applied. The server here is scripted after the draft: a finished
key's answer is replayed (errors too), a key still running is 409, the same key with a
payload of another checksum 422.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, OutcomeError, RetryPolicy, State

#: One attempt: an attempt whose answer is lost ends the call indeterminate.
ONCE = RetryPolicy(max_attempts=1)


class ChecksumServer:
    """An IETF-draft server whose fingerprint is the payload's checksum. It can break
    the connection right after applying, as a server that crashed after its commit."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, httpx.Response]] = {}
        self.ledger: list[str] = []
        self.drop_next = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(405)
        header = request.headers.get("idempotency-key", "")
        if not (len(header) > 2 and header[0] == header[-1] == '"'):
            return httpx.Response(400, json={"title": "Idempotency-Key is missing"})
        key, checksum = header[1:-1], hashlib.sha256(request.read()).hexdigest()
        found = self.records.get(key)
        if found is not None:
            if found[0] != checksum:
                return httpx.Response(
                    422,
                    json={"title": "Idempotency-Key is already used for another payload"},
                )
            return found[1]
        self.ledger.append(key)
        answer = httpx.Response(201, json={"id": f"pay_{len(self.ledger)}", "status": "paid"})
        self.records[key] = (checksum, answer)
        if self.drop_next:
            self.drop_next = False
            raise httpx.ReadError("the connection broke after it was applied", request=request)
        return answer


def _client(tmp_path: Path, server: ChecksumServer) -> Client:
    return Client(
        store=tmp_path / "client.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server.handle),
        base_url="https://payments.example",
        profile="ietf",
        policy=ONCE,
    )


def _state(call: object) -> State:
    try:
        outcome = call() if callable(call) else call
    except OutcomeError as exc:
        return exc.outcome.state
    return outcome.state


def test_a_json_body_built_in_another_order_is_answered_for_the_payment_made(
    tmp_path: Path,
) -> None:
    server = ChecksumServer()
    server.drop_next = True
    with _client(tmp_path, server) as client:
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments",
                json={"amount": 1999, "currency": "EUR", "reference": "order-1042"},
                operation_id="order-1042",
            )
        # The application, restarted, builds the same payment in another order.
        again = _state(
            lambda: client.post(
                "/v1/payments",
                json={"reference": "order-1042", "currency": "EUR", "amount": 1999},
                operation_id="order-1042",
            )
        )
    assert server.ledger == [server.ledger[0]], "paid more than once"
    assert again is not State.FAILED, "a payment made is reported failed (key conflict)"


def test_an_upload_issued_again_by_its_id_is_answered_for_the_upload_made(
    tmp_path: Path,
) -> None:
    server = ChecksumServer()
    server.drop_next = True
    evidence = tmp_path / "receipt.pdf"
    evidence.write_bytes(b"%PDF-1.7 " + bytes(range(256)) * 8)

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

    with _client(tmp_path, server) as client:
        assert upload(client) is State.INDETERMINATE
        again = upload(client)  # a new boundary: other bytes, the same upload
    assert len(server.ledger) == 1
    assert again is not State.FAILED, "an upload made is reported failed (key conflict)"
    assert again is State.SUCCEEDED, json.dumps(str(again))


class RequestKeyedServer:
    """django-idempotency-key 1.3.0 (its middleware and `BasicKeyEncoder`): a record is
    keyed by a hash of the key, the path, the method and the body's bytes; only a 2xx is
    kept; a key seen with that very request gets the stored body, status 409. Another
    body under the key finds no record: it runs."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self.ledger: list[bytes] = []
        self.drop_next = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        key = request.headers.get("idempotency-key")
        if key is None:
            return httpx.Response(400)
        digest = hashlib.sha256()
        for part in (key.encode(), request.url.path.encode(), request.method.encode()):
            digest.update(part)
        digest.update(request.read())
        record = digest.hexdigest()
        if record in self.records:
            return httpx.Response(409, content=self.records[record])
        self.ledger.append(request.content)
        body = json.dumps({"id": f"pay_{len(self.ledger)}", "status": "paid"}).encode()
        self.records[record] = body
        if self.drop_next:
            self.drop_next = False
            raise httpx.ReadError("the connection broke after it was applied", request=request)
        return httpx.Response(201, content=body, headers={"Content-Type": "application/json"})


def test_a_body_built_in_another_order_is_not_paid_again_where_records_are_keyed_by_bytes(
    tmp_path: Path,
) -> None:
    """The Django cache keeps its records a day here, and the profile says so (the
    documented way: a built-in with changes). Once the in-flight hold is over, the
    operation issued again by its id is sent again: the very request the server saw
    is answered from its record; other bytes would run a second payment."""
    from idemclient import profiles

    shop = profiles.django_idempotency_key.replace(name="shop-django", key_retention=86400.0)
    server = RequestKeyedServer()
    server.drop_next = True
    clock = ManualClock()
    with Client(
        store=tmp_path / "client.db",
        clock=clock,
        transport=httpx.MockTransport(server.handle),
        base_url="https://shop.example",
        profile=shop,
        policy=ONCE,
    ) as client:
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments",
                json={"amount": 1999, "currency": "EUR", "reference": "order-1042"},
                operation_id="order-1042",
            )
        clock.advance(3600.0)  # past the in-flight hold, well within the retention
        again = _state(
            lambda: client.post(
                "/v1/payments",
                json={"reference": "order-1042", "currency": "EUR", "amount": 1999},
                operation_id="order-1042",
            )
        )
    assert len(server.ledger) == 1, f"paid {len(server.ledger)} times, reported {again}"
    assert again is State.SUCCEEDED
