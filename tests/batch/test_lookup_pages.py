"""A look-up whose answer is one page of several (`has_more: true`, a next page) is not
a whole answer: an empty first page (an API that filters after paginating) is not "not
found". The run stops before sending, as for any look-up that cannot say."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from idemclient import Client, ManualClock
from idemclient.batch import BatchInvalid, read_batch, submit

from .support import payroll


class PagingPSP:
    """Paid the row long ago (its key forgotten); its search pages before filtering."""

    def __init__(self, paid: dict[str, object]) -> None:
        self.payments = [paid]

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            if "cursor" not in request.url.params:  # page 1: none of this reference
                return httpx.Response(
                    200, json={"object": "list", "data": [], "has_more": True,
                               "next_page": "/v1/payouts?cursor=2"},
                )  # fmt: skip
            return httpx.Response(200, json={"object": "list", "data": self.payments})
        body = json.loads(request.content)
        self.payments.append({**body, "id": f"po_{len(self.payments)}", "status": "succeeded"})
        return httpx.Response(201, json=self.payments[-1])


def test_one_page_of_several_is_not_taken_as_not_found(tmp_path: Path) -> None:
    (tmp_path / "nov.csv").write_text(payroll(1))
    batch = read_batch(tmp_path / "nov.csv")
    already = {**batch.rows[0].payload(), "id": "po_0", "status": "succeeded"}
    psp = PagingPSP(already)
    with (
        Client(
            store=tmp_path / "b.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
        ) as client,
        pytest.raises(BatchInvalid, match="an empty page of several"),
    ):
        submit(batch, client)
    assert len(psp.payments) == 1  # paid once, long ago; never sent again
