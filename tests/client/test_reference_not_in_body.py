"""A look-up's "none" by a `reference=` the request never carried settles nothing.

`reference=` is the store's label for the operation's end-to-end reference, which a
look-up by `{reference}` asks the server for (docs/concepts.md). A caller that passes the
order's id as `reference=` while the body carries the order's number would get, after a
lost answer and the server's key retention, a look-up that finds nothing, the operation
settled `not_sent`, and the same operation issued again paid a second time (the server
forgot its key). A server finds a payment only by a reference it was sent: by one the
request never carried, its "none" settles nothing, and the operation is left as it was.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy
from idemclient._reconcile import carried
from idemclient.testing import ReferenceServer

DAY = 86_400.0
LOOKUP = "/v1/payments?reference={reference}"


def _lost_then_forgotten(
    server: ReferenceServer,
    psp: Client,
    clock: ManualClock,
    body: dict[str, object],
    reference: str,
) -> None:
    """The payment made, its answer lost, and the server past its key retention."""
    server.drop(times=1, path="/v1/payments")  # applied, then the connection is cut
    with pytest.raises(Indeterminate):
        psp.post("/v1/payments", json=body, operation_id="o-1", reference=reference)
    clock.advance(3 * DAY)
    server.reap()  # the server forgets keys past its retention


class _Counting(httpx.BaseTransport):
    """The reference server's transport, counting what reaches it."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner, self.sent = inner, 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return self.inner.handle_request(request)


def _client(transport: httpx.BaseTransport, tmp_path: Path, clock: ManualClock) -> Client:
    return Client(
        base_url="https://psp.test",
        transport=transport,
        headers={"Authorization": "Bearer sk_test_merchant"},
        store=tmp_path / "payments.db",
        clock=clock,
        policy=RetryPolicy(max_attempts=1),
    )


def test_a_reference_the_request_never_carried_does_not_settle_it(tmp_path: Path) -> None:
    clock = ManualClock()
    body = {"amount": 1999, "currency": "EUR", "reference": "ORD-1042"}
    with ReferenceServer(clock=clock) as server:
        counted = _Counting(server.transport)
        with _client(counted, tmp_path, clock) as psp:
            _lost_then_forgotten(server, psp, clock, body, "order-1042")
            asked = counted.sent
            with pytest.raises(Indeterminate, match="never sent with the reference") as unsettled:
                psp.reconcile("o-1", lookup=LOOKUP)
            assert "'order-1042'" in str(unsettled.value)
            assert counted.sent == asked + 1  # the look-up, and nothing else
            assert psp.operation("o-1").state.value == "indeterminate"  # left as it was
            with pytest.raises(Indeterminate):  # past retention: never sent again blind
                psp.post("/v1/payments", json=body, operation_id="o-1", reference="order-1042")
            assert counted.sent == asked + 1
        assert len(server.ledger()) == 1


def test_a_reference_the_request_carried_is_looked_up_and_settles_it(tmp_path: Path) -> None:
    clock = ManualClock()
    body = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
    with ReferenceServer(clock=clock) as server:
        counted = _Counting(server.transport)
        with _client(counted, tmp_path, clock) as psp:
            _lost_then_forgotten(server, psp, clock, body, "order-1042")
            asked = counted.sent
            outcome = psp.reconcile("o-1", lookup=LOOKUP)
            assert outcome.state.value == "succeeded"  # found: the payment made
            assert counted.sent == asked + 1  # the look-up
        assert len(server.ledger()) == 1


@pytest.mark.parametrize(
    ("url", "headers", "body", "expected"),
    [
        ("https://psp.test/v1/payments", (), b'{"reference": "order-1042"}', True),
        ("https://psp.test/v1/payments", (), b'{"meta": {"order": "\\u00f6rder-1"}}', True),
        ("https://psp.test/v1/payments", (), b"amount=1&ref=order%2D1042", True),
        ("https://psp.test/v1/orders/order-1042/pay", (), b"{}", True),
        ("https://psp.test/v1/payments", (("x-order", "order-1042"),), b"{}", True),
        ("https://psp.test/v1/payments", (), b'{"reference": "ORD-1042"}', False),
        ("https://psp.test/v1/payments", (), b"", False),
    ],
    ids=["json", "json-escaped", "form", "url", "header", "elsewhere", "no-body"],
)
def test_where_a_reference_is_carried(
    url: str, headers: tuple[tuple[str, str], ...], body: bytes, expected: bool
) -> None:
    reference = "\u00f6rder-1" if b"u00f6" in body else "order-1042"
    record = SimpleNamespace(url=url, headers=headers, body=body)
    assert carried(reference, record) is expected  # type: ignore[arg-type]
