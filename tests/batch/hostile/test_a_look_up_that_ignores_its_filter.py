"""A payment a look-up names counts as the row only if it shows the row's reference
(in the field the look-up is told, `reference` by default) or its key, and has its
content. A look-up whose filter the server ignores (an unknown query parameter: most
APIs ignore those) answers with other payments: those of other references are set
aside, so last month's identical salary is not taken for this month's; payments that
show neither field cannot be told apart, and the look-up is refused as not working
(nothing recorded or sent) until the field is named."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock
from idemclient.batch import BatchInvalid, read_batch, submit

from ..support import payroll


class PSP:
    """Its look-up ignores the filter it is given; its payments show the reference as
    `external_reference`."""

    def __init__(self) -> None:
        self.payments: list[dict[str, object]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":  # filters it does not know are ignored
            return httpx.Response(200, json={"data": self.payments})
        body = json.loads(request.content)
        self.payments.append(
            {
                "id": f"po_{len(self.payments)}",
                "amount": body["amount"],
                "currency": body["currency"],
                "external_reference": body["reference"],
                "status": "succeeded",
            }
        )
        return httpx.Response(201, json=self.payments[-1])


def client_of(psp: PSP, store: Path) -> Client:
    return Client(
        store=store,
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
    )


def test_a_payment_that_shows_no_reference_is_never_taken_for_the_row(tmp_path: Path) -> None:
    (tmp_path / "nov.csv").write_text(payroll(1, prefix="E", value_date="2026-11-30"))
    (tmp_path / "dec.csv").write_text(payroll(1, prefix="E", value_date="2026-12-31"))
    nov = read_batch(tmp_path / "nov.csv", batch_reference="2026-11")
    dec = read_batch(tmp_path / "dec.csv", batch_reference="2026-12")
    psp = PSP()
    lookup = "{path}?ref={reference}"
    with client_of(psp, tmp_path / "b.db") as client:
        assert submit(nov, client, lookup=lookup).exit_code == 0
        assert len(psp.payments) == 1
        # November's payout shows no `reference`: it cannot say whether it is December's.
        with pytest.raises(BatchInvalid, match="show neither 'reference' nor"):
            submit(dec, client, lookup=lookup)
        assert len(psp.payments) == 1  # nothing recorded, nothing sent
        # Told where the reference is, November's payout is another row's: not this one.
        named = submit(dec, client, lookup=lookup, reference_field="external_reference")
    assert named.exit_code == 0, named.summary()
    assert len(psp.payments) == 2
    # And November, run again from a fresh store, is found, not paid again.
    with client_of(psp, tmp_path / "fresh.db") as client:
        again = submit(nov, client, lookup=lookup, reference_field="external_reference")
    assert again.exit_code == 0, again.summary()
    assert "found on the server by look-up" in again.rows[0].reason
    assert len(psp.payments) == 2
