"""A payout batch from Python: rows from anywhere, one report, safe to run twice.

Each row is its reference: the first run looks every row up on the server (none is
there yet) and pays it; the second finds every row in the store and sends nothing.
Runs against the reference server on a real loopback socket.
"""

from idemclient import Client
from idemclient.batch import Batch, submit
from idemclient.testing import serve

rows = [
    {"ref": f"2026-12-E{n}", "amount": 100_000 + n, "currency": "EUR", "value_date": "2026-12-31"}
    for n in range(1, 51)
]
batch = Batch.from_records(rows)  # references that repeat monthly: reference="2026-12"

with (
    serve() as live,
    Client(
        base_url=live.url, headers={"Authorization": "Bearer payroll-ops"}, store="batches.db"
    ) as client,
):
    live.server.answer(503, times=5, path="/v1/payouts", retry_after_ms=100)
    first = submit(batch, client, concurrency=8)
    second = submit(batch, client)  # the same batch again: nothing is paid twice
    print(first.summary())
    print(second.summary())
    report_path = "report.json"
    first.write(report_path)
    print("payouts on the server:", len(live.server.ledger()))
