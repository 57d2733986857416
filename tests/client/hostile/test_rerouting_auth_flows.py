"""An auth flow that sends the operation to another host or path (a regional endpoint,
a gateway prefix) sends the operation: with its key, recorded, answered with an outcome.
The request is recognised by its method and body."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import httpx

from idemclient import Client, ManualClock

from .psp import PAYMENT, PSP


class RegionalAuth(httpx.Auth):
    """Signs, and routes the merchant to its region's gateway."""

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield httpx.Request(
            request.method,
            request.url.copy_with(host="eu.psp.test"),
            headers={**request.headers, "Authorization": "Bearer signed"},
            content=request.content,
        )


def test_an_operation_an_auth_flow_reroutes_is_never_sent_without_its_key(tmp_path: Path) -> None:
    psp = PSP()
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        auth=RegionalAuth(),
    ) as client:
        for _ in range(2):  # the caller re-issues the operation id after an error
            try:
                client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
                break
            except RuntimeError:
                continue
    keys = [key for _, _, key, _ in psp.seen]
    assert None not in keys, f"sent without a key: {keys}"
    assert psp.total == 1, f"paid {psp.total} times"
