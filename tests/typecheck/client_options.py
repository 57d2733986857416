"""How a type checker sees the clients' methods: every option is a typed keyword, so a
misspelt one is an error. Checked by mypy --strict (see `test_client_typing.py`, and
`files` in pyproject.toml), never run.

Each misspelt option carries ``# type: ignore[call-arg]``: with warn_unused_ignores (part
of --strict) the check fails if mypy stops seeing the error, for instance if a method
went back to taking ``**kwargs: Any``.
"""

from __future__ import annotations

from typing import assert_type

import httpx

from idemclient import AsyncClient, Client, Outcome, aresume, resume, wrap

PAYMENT = {"amount": 1999, "currency": "EUR"}


def every_option_of_a_sync_operation(client: Client) -> None:
    assert_type(
        client.request(
            "POST",
            "/v1/payments",
            key="k-1",
            operation_id="order-1",
            identity=None,
            reference="inv-1",
            hooks=None,
            content=None,
            data=None,
            files=None,
            json=PAYMENT,
            params={"a": "b"},
            headers={"X-Trace": "1"},
            cookies=None,
            auth=None,
            follow_redirects=False,
            timeout=5.0,
            extensions={"trace": None},
        ),
        Outcome,
    )
    assert_type(client.post("/v1/payments", json=PAYMENT, operation_id="o"), Outcome)
    assert_type(client.put("/v1/payments/1", json=PAYMENT, identity=("inv", "put")), Outcome)
    assert_type(client.patch(httpx.URL("/v1/payments/1"), content=b"{}", key="k"), Outcome)
    assert_type(client.delete("/v1/payments/1", reference="inv-1"), Outcome)
    assert_type(client.get("/v1/payments", params={"reference": "inv-1"}), httpx.Response)
    assert_type(client.operation("order-1"), Outcome | None)
    assert_type(client.resume(limit=10, origin="https://psp.example"), list[Outcome])
    assert_type(client.reconcile("order-1", lookup="/v1/payments?reference={reference}"), Outcome)


def misspelt_sync_options(client: Client) -> None:
    client.post("/v1/payments", json=PAYMENT, operaton_id="o")  # type: ignore[call-arg]
    client.put("/v1/payments/1", jsn=PAYMENT)  # type: ignore[call-arg]
    client.patch("/v1/payments/1", refrence="inv-1")  # type: ignore[call-arg]
    client.delete("/v1/payments/1", idempotency_key="k")  # type: ignore[call-arg]
    client.request("POST", "/v1/payments", identiy=("inv", "1"))  # type: ignore[call-arg]
    client.get("/v1/payments", param={"a": "b"})  # type: ignore[call-arg]
    client.resume(limits=10)  # type: ignore[call-arg]
    client.reconcile("order-1", look_up="/v1/payments")  # type: ignore[call-arg]


def wrong_types(client: Client) -> None:
    client.post("/v1/payments", operation_id=7)  # type: ignore[arg-type]
    client.post("/v1/payments", timeout="soon")  # type: ignore[arg-type]
    # The options are keywords only, as httpx's are.
    client.post("/v1/payments", "order-1")  # type: ignore[call-arg]


async def every_option_of_an_async_operation(client: AsyncClient) -> None:
    assert_type(await client.post("/v1/payments", json=PAYMENT, operation_id="o"), Outcome)
    assert_type(await client.put("/v1/payments/1", json=PAYMENT), Outcome)
    assert_type(await client.patch("/v1/payments/1", json=PAYMENT), Outcome)
    assert_type(await client.delete("/v1/payments/1"), Outcome)
    assert_type(await client.request("POST", "/v1/payments", key="k"), Outcome)
    assert_type(await client.get("/v1/payments"), httpx.Response)
    assert_type(await client.aoperation("order-1"), Outcome | None)
    assert_type(await client.resume(), list[Outcome])
    assert_type(await client.reconcile("order-1"), Outcome)


async def misspelt_async_options(client: AsyncClient) -> None:
    await client.post("/v1/payments", json=PAYMENT, operaton_id="o")  # type: ignore[call-arg]
    await client.put("/v1/payments/1", jsn=PAYMENT)  # type: ignore[call-arg]
    await client.patch("/v1/payments/1", refrence="inv-1")  # type: ignore[call-arg]
    await client.delete("/v1/payments/1", idempotency_key="k")  # type: ignore[call-arg]
    await client.request("POST", "/v1/payments", identiy="1")  # type: ignore[call-arg]
    await client.get("/v1/payments", param={"a": "b"})  # type: ignore[call-arg]


async def the_functions(http: httpx.Client, ahttp: httpx.AsyncClient) -> None:
    assert_type(wrap(http, store="s.db"), httpx.Client)
    assert_type(wrap(ahttp, store="s.db", profile="stripe"), httpx.AsyncClient)
    assert_type(resume(http, limit=5), list[Outcome])
    wrap(http, stor="s.db")  # type: ignore[call-arg]
    resume(http, limt=5)  # type: ignore[call-arg]
    assert_type(await aresume(ahttp, origin="https://psp.example"), list[Outcome])
