"""An ASGI checkout (plain ASGI, no framework) that charges orders with AsyncClient.

The shop app is served in-process with httpx's ASGITransport; the PSP is the reference
server, which applies the first charge and then drops the connection. The customer
also double-clicks. The order is charged once.
"""

import asyncio
import json

import httpx

import idemclient
from idemclient.testing import ReferenceServer

psp_server = ReferenceServer()
psp_server.drop(path="/v1/payments")  # applied, then the answer is lost

psp = idemclient.AsyncClient(
    base_url="https://psp.test",
    transport=psp_server.transport,
    headers={"Authorization": "Bearer sk_test_shop"},
    store="shop-payments.db",
)


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    """POST /orders/{id}/pay with {"amount": ...}: charge the order once."""
    if scope["type"] != "http":
        return
    order_id = scope["path"].split("/")[2]
    body = json.loads((await receive())["body"])
    try:
        outcome = await psp.post(
            "/v1/payments",
            json={"amount": body["amount"], "currency": "EUR", "reference": order_id},
            operation_id=f"order-{order_id}",
        )
        outcome.raise_for_status()  # a decline is not a payment
    except idemclient.Indeterminate:
        status, answer = 202, {"paid": None, "detail": "confirming your payment"}
    except idemclient.NotSent:
        status, answer = 503, {"paid": False, "detail": "nothing charged; try again"}
    except idemclient.OutcomeError:
        status, answer = 402, {"paid": False, "detail": "your card was declined"}
    else:
        status, answer = 200, {"paid": True, "id": outcome.json()["id"]}
    payload = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": payload})


async def main() -> None:
    shop = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop")
    async with shop:
        first, second = await asyncio.gather(  # a double click
            shop.post("/orders/1042/pay", json={"amount": 2500}),
            shop.post("/orders/1042/pay", json={"amount": 2500}),
        )
    await psp.aclose()
    print("answers:", first.status_code, second.status_code)
    print("same payment:", first.json()["id"] == second.json()["id"])
    print("charges on the PSP:", len(psp_server.ledger()))


asyncio.run(main())
