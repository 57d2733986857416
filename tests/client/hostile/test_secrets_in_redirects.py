"""A secret query value is kept out of the store everywhere, not only out of the stored
URL and the fingerprint: out of the evidence of a redirect (the `Location` an
http->https redirect echoes with the whole query) and out of an answer's stored
`Location`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, OutcomeError

from .psp import PAYMENT

SECRET = "tok_SECRET_QUERY_VALUE_0451"


def _file_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store.parent.glob(store.name + "*"))


def test_a_redirect_echoing_a_secret_query_value_does_not_write_it(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        # A load balancer's http -> https redirect: the whole URL, query included.
        return httpx.Response(301, headers={"location": str(request.url.copy_with(scheme="https"))})

    store = tmp_path / "c.db"
    with Client(
        store=store,
        clock=ManualClock(),
        transport=httpx.MockTransport(handler),
        base_url="http://psp.test",
        params={"access_token": SECRET},
    ) as client:
        with pytest.raises(OutcomeError):
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        record = client.store.get("op")
    assert record is not None
    assert SECRET not in record.url  # the URL column is redacted...
    assert SECRET not in record.evidence, record.evidence  # ...the evidence is not
    assert SECRET.encode() not in _file_bytes(store)


def test_an_answers_location_is_stored_without_a_secret_query_value(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            201,
            headers={"location": f"https://psp.test/v1/payments/p1?access_token={SECRET}"},
            json={"id": "p1"},
        )

    store = tmp_path / "c.db"
    with Client(store=store, clock=ManualClock(), transport=httpx.MockTransport(handler)) as client:
        outcome = client.post("https://psp.test/v1/payments", json=PAYMENT, operation_id="op")
        record = client.store.get("op")
    assert outcome.response is not None
    assert SECRET in outcome.response.headers["location"]  # the caller sees the answer as sent
    assert record is not None
    assert record.response is not None
    assert ("location", "https://psp.test/v1/payments/p1?access_token=") in record.response.headers
    assert SECRET.encode() not in _file_bytes(store)
