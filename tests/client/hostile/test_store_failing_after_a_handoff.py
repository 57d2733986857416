"""A store that fails once an attempt may have arrived gives `Indeterminate` (the
`StoreError` chained), never a bare `StoreError`, on the paths after a handoff too: the
continuation's claim after a 307, the settling after a 303."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, StoreError
from idemclient.errors import StoreUnavailable
from idemclient.store import SQLiteStore

from .psp import PAYMENT, PSP


class BreakingStore(SQLiteStore):
    """Fails every call of the named methods once `broken` is set."""

    broken: frozenset[str] = frozenset()

    def _check(self, name: str) -> None:
        if name in self.broken:
            raise StoreUnavailable(self.path, "cannot be used: database or disk is full")

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self._check("claim")
        return super().claim(*args, **kwargs)

    def settle(self, *args: Any, **kwargs: Any) -> Any:
        self._check("settle")
        return super().settle(*args, **kwargs)

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        result = super().finish(*args, **kwargs)
        if "after-finish" in self.broken:  # the disk fills right after the hand-back
            self.broken = frozenset({"claim", "settle"})
        return result


def see_other(psp: PSP, request: httpx.Request) -> httpx.Response | None:
    psp.apply(request)  # processed; the result is elsewhere
    return httpx.Response(303, headers={"location": "/v1/payments/pay_1"})


def temporary(psp: PSP, request: httpx.Request) -> httpx.Response | None:
    psp.apply(request)  # applied, and the answer says "go there"
    return httpx.Response(307, headers={"location": "/v2/payments"})


@pytest.mark.parametrize("step", [see_other, temporary], ids=["303", "307"])
def test_a_store_failing_after_a_handed_back_attempt_is_indeterminate(
    tmp_path: Path, step: Any
) -> None:
    psp = PSP(step)
    store = BreakingStore(tmp_path / "c.db")
    with Client(
        store=store,
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    ) as client:
        store.broken = frozenset({"after-finish"})
        with pytest.raises((Indeterminate, StoreError)) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
    store.close()
    assert psp.total == 1
    assert isinstance(raised.value, Indeterminate), (
        f"{type(raised.value).__name__}: {raised.value}"
        f" -- though the payment was applied ({StoreError.__doc__})"
    )
