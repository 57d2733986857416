"""The README's first example: a merchant app charging an order, safely.

In production `base_url` is your PSP; here the reference server stands in for it,
in-process, so that this file runs anywhere.
"""

import idemclient
from idemclient.testing import ReferenceServer

psp_server = ReferenceServer()

with idemclient.Client(
    base_url="https://psp.test",
    transport=psp_server.transport,  # in production: leave out
    headers={"Authorization": "Bearer sk_test_merchant"},
    store="payments.db",
) as psp:
    try:
        outcome = psp.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "EUR", "reference": "order-1042"},
            operation_id="order-1042",
        ).raise_for_status()
    except idemclient.Indeterminate as exc:
        print("maybe charged: resume later with key", exc.key)
    except idemclient.OutcomeError as exc:
        print("not charged:", exc)  # declined (402...), or never sent
    else:
        print(outcome.state, outcome.json()["id"])
