"""Retrofit an httpx client you already have: one line, and its settings stay.

The reference server stands in for the PSP and drops the first answer after applying
the payment: the wrapped client retries with the same key and gets the stored answer.
"""

import httpx

import idemclient
from idemclient.testing import ReferenceServer

server = ReferenceServer()
server.drop(path="/v1/payments")  # applied, then the connection is cut

http = httpx.Client(
    base_url="https://psp.test",
    transport=server.transport,
    headers={"Authorization": "Bearer sk_test_merchant"},
    timeout=10.0,
)
idemclient.wrap(http, store="payments.db")  # the one line

response = http.post(
    "/v1/payments", json={"amount": 4200, "currency": "EUR", "reference": "order-7"}
)
outcome = response.extensions["idemclient.outcome"]
print(response.status_code, "after", outcome.attempts, "attempts; replayed:", outcome.replayed)
[entry] = server.ledger()
print("payments on the server:", len(server.ledger()), "applied:", entry.ext1_applied)
http.close()
