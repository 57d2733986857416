"""With `RetryPolicy(server_replays=True)`, a refusal after an attempt that may have been
applied is the server's stored answer, except the refusals that a firewall, CDN or load
balancer in front of it gives as readily (403, 404...): those stay indeterminate unless
marked as a replay."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, OutcomeError, RetryPolicy, State

from .psp import PAYMENT, PSP, answer, applied_then


@pytest.mark.parametrize("status", [403, 404])
def test_an_edge_refusal_after_an_applied_attempt_is_not_failed(
    tmp_path: Path, status: int
) -> None:
    psp = PSP(applied_then(httpx.ReadTimeout), answer(status, server="cloudflare"))
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        policy=RetryPolicy(server_replays=True),
    ) as client:
        try:
            outcome = client.post("/v1/payments", json=PAYMENT, operation_id="op")
            state = outcome.state
        except OutcomeError as exc:
            state = exc.outcome.state
    assert psp.total == 1
    assert state is not State.FAILED, f"applied payment reported failed after HTTP {status}"
