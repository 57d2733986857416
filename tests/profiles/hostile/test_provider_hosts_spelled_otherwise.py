"""A known provider's host spelled otherwise (in capitals, with the trailing dot of a
fully qualified name, a port, credentials in the URL, or Unicode dots that IDNA maps to
"."), which DNS resolves to that provider all the same, is that provider's host: a
client that chose no profile speaks its profile there, and a payment whose answer was
lost is paid once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, State, profiles
from idemclient._time import CLOCK_SKEW
from idemclient.testing import ReferenceServer

from ..server_speakers import AUTH, BODY, PATH


@dataclass
class Seen(httpx.BaseTransport):
    """The server's transport, keeping the PayPal-Request-Id of every POST."""

    inner: httpx.BaseTransport
    keys: list[str | None]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.keys.append(request.headers.get("paypal-request-id"))
        return self.inner.handle_request(request)


SPELLINGS = [
    "API-M.PAYPAL.COM",
    "api-m.paypal.com.",
    "api-m.paypal.com:443",
    "merchant:secret@api-m.paypal.com",
    "api-m\uff0epaypal\uff0ecom",  # FULLWIDTH FULL STOP
    "api-m.paypal.com\u3002",  # IDEOGRAPHIC FULL STOP, as the trailing dot
]


@pytest.mark.parametrize("spelled", SPELLINGS)
def test_a_provider_s_host_spelled_otherwise_speaks_its_profile_and_pays_once(
    tmp_path: Path, spelled: str
) -> None:
    clock = ManualClock()
    seen: list[str | None] = []
    with ReferenceServer(profile="paypal", clock=clock) as server:
        server.drop(path=PATH["paypal"])  # applied, its answer lost
        with Client(
            store=tmp_path / "c.db",
            clock=clock,
            transport=Seen(server.transport, seen),
            base_url=f"https://{spelled}",
            headers=AUTH,
        ) as client:
            with pytest.raises(Indeterminate):  # not sent again while it may still run
                client.post(PATH["paypal"], json=BODY, operation_id="order-1")
            clock.advance(profiles.paypal.in_flight_for + CLOCK_SKEW)
            (outcome,) = client.resume()
        assert outcome.state is State.SUCCEEDED
        assert len(server.ledger()) == 1
    assert len(seen) == 2, seen  # the payment, and once more after the hold
    assert len(set(seen)) == 1, seen  # one key, where PayPal reads it
