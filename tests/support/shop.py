"""A client of the reference server, as the tests' one shop sees it: its base URL, its
token, one store and one clock. Tests that pay and look up through `ReferenceServer`
build their clients here rather than each writing the same constructor."""

from __future__ import annotations

from typing import Any

from idemclient import Client, ManualClock, RetryPolicy
from idemclient.profiles import Profile
from idemclient.testing import ReferenceServer

#: a look-up by the payment's end-to-end reference, on the reference server
BY_REFERENCE = "/v1/payments?reference={reference}"


def shop_client(
    server: ReferenceServer,
    clock: ManualClock,
    store: Any,
    *,
    profile: str | Profile | None = None,
    **policy: Any,
) -> Client:
    """A client of `server` as shop-1, on `store` (a path, or a store object) and
    `clock`; `policy`: the `RetryPolicy`'s fields (`max_attempts=1`, say)."""
    return Client(
        base_url="https://psp.test",
        transport=server.transport,
        headers={"Authorization": "Bearer shop-1"},
        store=store,
        clock=clock,
        profile=profile,
        policy=RetryPolicy(**policy),
    )
