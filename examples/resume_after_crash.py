"""After a crash or an outage: resume every unfinished operation with its own key.

First the PSP applies the payment but every answer is lost, so the call ends
indeterminate (maybe charged). Later, a fresh client on the same store resumes it:
the same key is sent, the server replays its stored answer, nothing is charged twice.
"""

import idemclient
from idemclient.testing import ReferenceServer

server = ReferenceServer()
options = {
    "base_url": "https://psp.test",
    "transport": server.transport,
    "headers": {"Authorization": "Bearer sk_test_merchant"},
    "store": "payments.db",
    "policy": idemclient.RetryPolicy(max_attempts=3),
    "clock": idemclient.ManualClock(),  # no real waiting in this example
}

server.drop(path="/v1/payments", times=3)  # applied, but no answer ever arrives
with idemclient.Client(**options) as psp:
    try:
        psp.post(
            "/v1/payments",
            json={"amount": 990, "currency": "GBP", "reference": "order-99"},
            operation_id="order-99",
        )
    except idemclient.Indeterminate as exc:
        print("indeterminate:", exc.outcome.state, "key", exc.key)

# ... the process restarts ...
with idemclient.Client(**options) as psp:
    for outcome in psp.resume():
        print("resumed", outcome.operation_id, "->", outcome.state, "replayed:", outcome.replayed)

print("payments on the server:", len(server.ledger()))
