"""The in-process adapters: one transport for sync and async clients, and respx."""

from __future__ import annotations

import logging

import httpx
import pytest
import respx

from idemclient.testing import (
    DropConnection,
    ReferenceServer,
    ReferenceTransport,
    ServerRequest,
    ServerResponse,
    serve,
)

from .server_helpers import BODY

AUTH = {"Authorization": "Bearer alice"}


def test_one_transport_object_serves_sync_and_async_clients(
    reference_server: ReferenceServer,
) -> None:
    transport = reference_server.transport
    assert isinstance(transport, ReferenceTransport)
    assert isinstance(transport, httpx.BaseTransport)
    assert isinstance(transport, httpx.AsyncBaseTransport)


@pytest.mark.anyio
async def test_an_async_client_gets_the_same_protocol(reference_server: ReferenceServer) -> None:
    async with httpx.AsyncClient(
        transport=reference_server.transport, base_url="http://psp.test", headers=AUTH
    ) as client:
        first = await client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "a1"})
        again = await client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "a1"})
        other = await client.post(
            "/v1/payments", json={**BODY, "amount": 1}, headers={"Idempotency-Key": "a1"}
        )
    assert first.status_code == 201
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422


@pytest.mark.anyio
async def test_async_drops_and_timeouts_raise_what_a_network_would(
    reference_server: ReferenceServer,
) -> None:
    async with httpx.AsyncClient(
        transport=reference_server.transport, base_url="http://psp.test", headers=AUTH
    ) as client:
        reference_server.drop()
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "a2"})
        reference_server.delay(120)
        with pytest.raises(httpx.ReadTimeout):
            await client.post(
                "/v1/payments", json=BODY, headers={"Idempotency-Key": "a3"}, timeout=10
            )
    assert [e.key_state for e in reference_server.ledger()] == ["finished", "finished"]


@pytest.mark.anyio
async def test_an_async_request_held_at_a_gate_does_not_block_the_event_loop(
    reference_server: ReferenceServer,
) -> None:
    import anyio

    gate = reference_server.hold_external(1)
    results: dict[str, int] = {}
    async with httpx.AsyncClient(
        transport=reference_server.transport, base_url="http://psp.test", headers=AUTH
    ) as client:

        async def post(name: str) -> None:
            response = await client.post(
                "/v1/payments", json=BODY, headers={"Idempotency-Key": "a4"}
            )
            results[name] = response.status_code

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(post, "first")
            with anyio.fail_after(10):
                while not gate.reached:  # bounded by fail_after; yields to the loop
                    await anyio.sleep(0)
            await post("second")  # answered while the first is parked in its thread
            gate.release()
    assert results == {"second": 409, "first": 201}


def test_the_respx_side_effect_serves_a_mocked_host(reference_server: ReferenceServer) -> None:
    with respx.mock(assert_all_called=True) as router:
        router.route(host="api.psp.example").mock(side_effect=reference_server.respx_side_effect)
        with httpx.Client(base_url="https://api.psp.example", headers=AUTH) as client:
            first = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "r1"})
            again = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "r1"})
        assert router.calls.call_count == 2  # respx forgets its calls on exit
    assert first.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"


@pytest.mark.anyio
async def test_the_respx_side_effect_works_for_async_clients_and_faults(
    reference_server: ReferenceServer,
) -> None:
    reference_server.drop()
    with respx.mock() as router:
        router.route(host="api.psp.example").mock(side_effect=reference_server.transport)
        async with httpx.AsyncClient(base_url="https://api.psp.example", headers=AUTH) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "r2"})
            replay = await client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "r2"})
    assert replay.headers["idempotent-replayed"] == "true"


def test_a_streamed_request_body_is_read_before_it_reaches_the_core(
    reference_server: ReferenceServer,
) -> None:
    def chunks():
        yield b'{"amount": 5, "currency": "EUR", '
        yield b'"reference": "streamed"}'

    with httpx.Client(transport=reference_server.transport, headers=AUTH) as client:
        response = client.post(
            "http://psp.test/v1/payments", content=chunks(), headers={"Idempotency-Key": "s1"}
        )
    assert response.status_code == 201
    assert response.json()["reference"] == "streamed"


def test_the_core_can_be_driven_without_httpx(reference_server: ReferenceServer) -> None:
    request = ServerRequest.build(
        "post",
        "/v1/payments",
        headers={"Authorization": "Bearer alice", "Idempotency-Key": "sans-io"},
        body=b'{"amount": 5, "currency": "EUR", "reference": "r"}',
    )
    answer = reference_server.handle(request)
    assert isinstance(answer, ServerResponse)
    assert answer.status == 201
    assert answer.header("Content-Type") == "application/json"
    reference_server.drop()
    dropped = reference_server.handle(request)
    assert isinstance(dropped, DropConnection)


def test_an_unforeseen_failure_over_a_socket_is_a_500_problem_with_retry_after(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # docs/server.md promises problem+json for every error: a failure nobody foresaw
    # too, not the ASGI server's text/plain 500. In-process it raises, for the test.
    with ReferenceServer() as server, serve(server) as live:

        def broken(**_: object) -> object:
            raise RuntimeError("a bug in the server")

        monkeypatch.setattr(server._core.storage, "find_resources", broken)
        with caplog.at_level(logging.ERROR, logger="idemclient.testing"):
            response = httpx.get(
                f"{live.url}/v1/payments",
                params={"reference": "inv-1"},
                headers={"Authorization": "Bearer alice"},
            )
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "5"
    assert response.json()["type"] == "urn:idemclient:problem:internal-error"
    assert "a bug" not in response.text  # the details are the log's
    assert any("a bug in the server" in r.getMessage() or r.exc_info for r in caplog.records)
