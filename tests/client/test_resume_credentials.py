"""`resume()` never gives one origin's credentials to another.

An application that pays through two providers with one store, each client with its own
`Authorization: Bearer` secret, has both clients' unfinished operations in it. Each
operation goes back to the origin it was first sent to: a client with a `base_url`
resumes only its own origin's, so the other provider's host never receives this
client's secret (as httpx never sends a client's credentials to another origin on a
redirect), and the other provider's client resumes the rest.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock, NotSent, RetryPolicy


def test_resume_never_sends_one_origin_s_secret_to_another(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []
    down = True

    def psp(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        if down:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(201, json={"id": "pay_1"})

    clock = ManualClock()
    store = tmp_path / "app.db"

    def client_of(host: str, secret: str) -> Client:
        return Client(
            base_url=f"https://{host}",
            store=store,
            transport=httpx.MockTransport(psp),
            clock=clock,
            headers={"Authorization": f"Bearer {secret}"},
            policy=RetryPolicy(max_attempts=1),
        )

    with (
        client_of("cards.psp.test", "sk_live_cards") as cards,
        client_of("wallets.psp.test", "sk_live_wallets") as wallets,
    ):
        for client, operation_id in ((cards, "card-1"), (wallets, "wallet-1")):
            with pytest.raises(NotSent):
                client.post("/v1/payments", json={"amount": 100}, operation_id=operation_id)
        down = False
        seen.clear()
        by_cards = {outcome.operation_id: outcome for outcome in cards.resume()}
        assert seen == [("cards.psp.test", "Bearer sk_live_cards")]
        assert by_cards["card-1"].state.value == "succeeded"
        left = by_cards["wallet-1"]
        assert left.state.value == "not_sent"  # as it was: nothing sent
        assert "https://wallets.psp.test" in (left.evidence or "")
        seen.clear()
        by_wallets = {outcome.operation_id: outcome for outcome in wallets.resume()}
        assert seen == [("wallets.psp.test", "Bearer sk_live_wallets")]
        assert by_wallets["wallet-1"].state.value == "succeeded"
