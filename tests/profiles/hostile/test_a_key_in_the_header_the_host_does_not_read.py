"""A caller that gives its own key in the `Idempotency-Key` header (the default
profile's, and the habit of most payment code) to a client that chose no profile, at a
known provider's host whose server reads its key elsewhere (PayPal's
`PayPal-Request-Id`, Square's body field `idempotency_key`...): the client speaks that
provider's profile there. A key the caller gave is its key, used as given and never
replaced by one of the client's making (or, if it cannot be, refused before anything
is sent): the caller gave it so that the same payment asked again (by another machine,
after its store was lost) is the same payment at the server. Made anew in each store, it
is paid twice, each reported succeeded.

The provider's server is the reference server speaking its dialect at the provider's
real host name (an in-process transport), its ledger counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, ManualClock, OutcomeError, wrap
from idemclient.testing import ReferenceServer

from ..server_speakers import AUTH, BODY, PATH

#: A provider's host, and the profile a client that chose none speaks there (each reads
#: its key somewhere else than the Idempotency-Key header).
ELSEWHERE = [
    ("api-m.paypal.com", "paypal"),
    ("api.checkout.com", "checkout"),
    ("connect.squareup.com", "square"),
    ("api.razorpay.com", "razorpay"),
]
#: The caller's own key for the payment (a UUID: every provider takes one).
KEY = "123e4567-e89b-42d3-a456-000000000042"


def _paid_from_two_stores(tmp_path: Path, host: str, name: str, send: Any) -> list[str]:
    """The payment asked by a machine whose answer is lost, then by another machine
    (an empty store) with the same key in the same header; the states told."""
    clock = ManualClock()
    told: list[str] = []
    with ReferenceServer(profile=name, clock=clock) as server:
        server.drop(path=PATH[name])  # applied, its answer lost
        for machine in ("a", "b"):
            try:
                answer = send(tmp_path / f"{machine}.db", clock, server)
                told.append(str(getattr(answer, "state", answer)))
            except OutcomeError as error:
                told.append(str(error.outcome.state))
            except ValueError as refused:  # refused before anything is sent: fine
                told.append(f"refused: {refused}")
        assert len(server.ledger()) <= 1, f"paid {len(server.ledger())} times, told {told}"
    return told


@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_a_key_given_in_the_idempotency_key_header_is_the_payment_s_key(
    tmp_path: Path, host: str, name: str
) -> None:
    def send(store: Path, clock: ManualClock, server: ReferenceServer) -> Any:
        with Client(
            store=store,
            clock=clock,
            transport=server.transport,
            base_url=f"https://{host}",
            headers=AUTH,
        ) as client:
            return client.post(PATH[name], json=BODY, headers={"Idempotency-Key": KEY})

    _paid_from_two_stores(tmp_path, host, name, send)


@pytest.mark.parametrize(("host", "name"), ELSEWHERE)
def test_a_wrapped_client_that_sets_its_own_key_header_keeps_it(
    tmp_path: Path, host: str, name: str
) -> None:
    """The one-line retrofit of httpx code that already sends its own key."""

    def send(store: Path, clock: ManualClock, server: ReferenceServer) -> Any:
        with wrap(
            httpx.Client(transport=server.transport, base_url=f"https://{host}", headers=AUTH),
            store=store,
            clock=clock,
        ) as http:
            return http.post(PATH[name], json=BODY, headers={"Idempotency-Key": KEY})

    _paid_from_two_stores(tmp_path, host, name, send)
