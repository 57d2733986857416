"""Under a profile whose server keeps no answer under the key for some statuses
(`Profile.unstored`: Checkout.com keeps 2xx answers only), an operation that may have
been applied and was last answered with such a status (a 500 after the payment was made)
is never sent again under its key: the key is unused at the server, so the same key
would run the payment a second time. A look-up settles it (`ReconcileRequired`).

That must hold whatever happens to the record in between: here a later call of the same
operation is cut short by Ctrl-C as the store admits it (nothing sent, the record given
back, its evidence now "interrupted by KeyboardInterrupt before this call sent anything
(last seen before: HTTP 500 ...)"), twice. A resume after that, or another process,
still sends nothing. The server is scripted after Checkout.com's documented behaviour;
its ledger is counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, OutcomeError, RetryPolicy
from idemclient.store import SQLiteStore

BODY = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}
OPERATION = "order-1042"


class Checkout:
    """Keeps 2xx answers under their `Cko-Idempotency-Key` (and replays them); any other
    answer leaves the key unused. Its first payment is made, then answered 500."""

    def __init__(self) -> None:
        self.kept: dict[str, httpx.Response] = {}
        self.ledger: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return httpx.Response(200)  # a client's time probe
        key = request.headers.get("cko-idempotency-key")
        if key is not None and key in self.kept:
            return self.kept[key]
        self.ledger.append(str(key))
        if len(self.ledger) == 1:
            return httpx.Response(500, json={"error_type": "internal_error"})
        answer = httpx.Response(201, json={"id": f"pay_{len(self.ledger)}", "approved": True})
        if key is not None:
            self.kept[key] = answer
        return answer


class CtrlCAtAdmission:
    """A real SQLite store; once armed, Ctrl-C lands right after its next admission
    (`begin`) has committed."""

    def __init__(self, path: Path) -> None:
        self.inner = SQLiteStore(path)
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self.inner, name)
        if name != "begin":
            return inner

        def begin(*args: Any, **kwargs: Any) -> Any:
            result = inner(*args, **kwargs)
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt
            return result

        return begin


def test_a_payment_answered_500_at_checkout_is_not_sent_again_after_an_interrupted_call(
    tmp_path: Path,
) -> None:
    server, clock = Checkout(), ManualClock()
    store = CtrlCAtAdmission(tmp_path / "shop.db")
    options: dict[str, Any] = {
        "clock": clock,
        "transport": httpx.MockTransport(server.handle),
        "base_url": "https://api.checkout.com",
        "policy": RetryPolicy(max_attempts=3),
    }
    with Client(store=store, **options) as client:
        with pytest.raises(Indeterminate):  # made, answered 500: not sent again
            client.post("/payments", json=BODY, operation_id=OPERATION)
        for _ in range(2):  # the operator's Ctrl-C, twice: nothing sent
            store.armed = True
            with pytest.raises(KeyboardInterrupt):
                client.post("/payments", json=BODY, operation_id=OPERATION)
        assert len(server.ledger) == 1
        resumed = client.resume()  # the application's restart routine
        assert len(server.ledger) == 1, (
            f"paid twice, resume() told {[(o.state, o.replayed) for o in resumed]}"
        )
    with Client(store=tmp_path / "shop.db", **options) as restarted, pytest.raises(OutcomeError):
        restarted.post("/payments", json=BODY, operation_id=OPERATION)
    assert len(server.ledger) == 1, f"paid {len(server.ledger)} times"
