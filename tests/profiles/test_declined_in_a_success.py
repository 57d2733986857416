"""A payment declined in a 2xx answer, as Adyen and Checkout.com answer a declined card.

README and docs/client.md promise that `raise_for_status()` raises `OperationFailed` for
a refusal, so that "a declined card is never read as a payment". Two built-in profiles'
providers do not decline with a 4xx:

- Adyen answers a refused authorisation with HTTP 200 and `resultCode` `Refused`
  (also `Error`, `Cancelled`), with `refusalReason` and `refusalReasonCode`
  (docs.adyen.com/development-resources/refusal-reasons: "When your payment
  authorization request is not successful, the response returns HTTP status code 200");
- Checkout.com answers a declined card with a 2xx whose body says `"approved": false`,
  `"status": "Declined"` and a `response_code` in the 20xxx (soft decline) or 30xxx
  (hard decline) range (checkout.com/docs/resources/codes/http-response-codes).

Each answer here is written by hand from those pages. Under either profile such an
answer is a final refusal (`failed`, `OperationFailed` from `raise_for_status()`), as a
4xx decline is elsewhere; it was told `succeeded`, and the caller shipped an order that
was never paid.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from idemclient import AsyncClient, Client, Indeterminate, ManualClock, State, profiles
from idemclient.batch import read_batch, submit
from idemclient.errors import OperationFailed
from idemclient.profiles import Match

from .scripted import Scripted

_ADYEN_REFUSED = {
    "pspReference": "V4HZ4RBFJGXXGN82",
    "refusalReason": "Not enough balance",
    "refusalReasonCode": "12",
    "resultCode": "Refused",
    "merchantReference": "order-1042",
}
_ADYEN_AUTHORISED = {
    "pspReference": "V4HZ4RBFJGXXGN83",
    "resultCode": "Authorised",
    "merchantReference": "order-1043",
}
_CHECKOUT_DECLINED = {
    "id": "pay_mbabizu24mvu3mela5njyhpit4",
    "action_id": "act_mbabizu24mvu3mela5njyhpit4",
    "amount": 6540,
    "currency": "USD",
    "approved": False,
    "status": "Declined",
    "response_code": "20051",
    "response_summary": "Insufficient Funds",
    "reference": "order-1042",
}
_CHECKOUT_APPROVED = {
    "id": "pay_y3oqhf46pyzuxjbcn2giaqnb44",
    "amount": 6540,
    "currency": "USD",
    "approved": True,
    "status": "Authorized",
    "response_code": "10000",
    "response_summary": "Approved",
    "reference": "order-1043",
}

DECLINED = [
    pytest.param("adyen", "/v71/payments", 200, _ADYEN_REFUSED, id="adyen-refused"),
    pytest.param("checkout", "/payments", 201, _CHECKOUT_DECLINED, id="checkout-declined"),
]


@pytest.mark.parametrize(
    ("profile", "path", "status", "body", "state"),
    [
        *[pytest.param(*p.values, State.FAILED, id=p.id) for p in DECLINED],
        pytest.param(
            "adyen", "/v71/payments", 200, _ADYEN_AUTHORISED, State.SUCCEEDED, id="adyen-ok"
        ),
        pytest.param(
            "checkout", "/payments", 201, _CHECKOUT_APPROVED, State.SUCCEEDED, id="checkout-ok"
        ),
    ],
)
def test_a_card_declined_in_a_2xx_is_failed_and_an_approved_one_succeeded(
    make: Callable[..., Client],
    profile: str,
    path: str,
    status: int,
    body: dict[str, object],
    state: State,
) -> None:
    server = Scripted(httpx.Response(status, json=body))
    client = make(server, profile)
    outcome = client.post(path, json={"amount": 6540}, operation_id="order-1042")
    assert outcome.state is state
    if state is State.FAILED:
        with pytest.raises(OperationFailed):
            outcome.raise_for_status()
    again = client.post(path, json={"amount": 6540}, operation_id="order-1042")
    assert len(server.posts) == 1  # issued again: the stored answer, nothing sent
    assert again.state is state
    assert again.json() == body
    assert client.operation("order-1042").state is state


@pytest.mark.parametrize(("profile", "path", "status", "body"), DECLINED)
def test_a_decline_after_an_attempt_that_may_have_been_applied_is_not_told_either_way(
    make: Callable[..., Client], profile: str, path: str, status: int, body: dict[str, object]
) -> None:
    # The first attempt's answer was lost (it may have paid); a decline to the second
    # may be the server declining a duplicate of the payment it made: maybe applied.
    server = Scripted(httpx.ReadTimeout, httpx.Response(status, json=body))
    client = make(server, profile)
    with pytest.raises(Indeterminate):
        client.post(path, json={"amount": 6540}, operation_id="order-1042")
    assert len(server.posts) == 2
    assert client.operation("order-1042").state is State.INDETERMINATE


def test_a_profile_s_decline_is_a_2xx_with_codes() -> None:
    with pytest.raises(ValueError, match="declined"):
        profiles.adyen.replace(declined=(Match(frozenset({402}), codes=frozenset({"x"})),))
    with pytest.raises(ValueError, match="declined"):
        profiles.adyen.replace(declined=(Match(frozenset({200})),))
    with pytest.raises(ValueError, match="declined"):
        profiles.adyen.replace(declined=(Match(frozenset({202}), codes=frozenset({"x"})),))


@pytest.mark.anyio
async def test_the_async_client_tells_a_decline_in_a_2xx_failed(tmp_path: Path) -> None:
    server = Scripted(httpx.Response(200, json=_ADYEN_REFUSED))
    async with AsyncClient(
        store=tmp_path / "store.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(server),
        base_url="https://api.psp.test",
        profile="adyen",
    ) as client:
        outcome = await client.post("/v71/payments", json={"amount": 1}, operation_id="o-1")
        assert outcome.state is State.FAILED
        with pytest.raises(OperationFailed):
            outcome.raise_for_status()
    assert len(server.posts) == 1


@pytest.mark.parametrize(
    ("profile", "status", "body", "why"),
    [
        pytest.param("adyen", 200, _ADYEN_REFUSED, "Not enough balance", id="adyen"),
        pytest.param("checkout", 201, _CHECKOUT_DECLINED, "Insufficient Funds", id="checkout"),
    ],
)
def test_a_batch_row_declined_in_a_2xx_is_failed_with_the_reason(
    make: Callable[..., Client],
    tmp_path: Path,
    profile: str,
    status: int,
    body: dict[str, object],
    why: str,
) -> None:
    sample = _payroll(tmp_path, "GB93TEST20192164782032")
    server = Scripted(httpx.Response(201, json={"id": "pay_1"}), httpx.Response(status, json=body))
    client = make(server, profile)
    report = submit(read_batch(sample), client, concurrency=1, lookup=None)
    assert len(server.posts) == 2
    states = {row.ref: (row.state, row.reason) for row in report.rows}
    assert states["2026-11-E1000"][0] == "succeeded"
    state, reason = states["2026-11-E1001"]
    assert state == "failed"
    assert why in (reason or "")
    assert report.exit_code == 4
    # The operator corrects the declined row's account and runs the file again: nothing
    # of the declined payout was applied, so the correction is sent (under a key of its
    # own: the server keeps the decline under the first), as after a 402.
    corrected = _payroll(tmp_path, "GB93TEST20192164782099")
    again = submit(read_batch(corrected), client, concurrency=1, lookup=None)
    assert len(server.posts) == 3
    header = profiles.named(profile).key.header or ""
    assert server.posts[2].headers[header] != server.posts[1].headers[header]
    assert {row.ref: row.state for row in again.rows}["2026-11-E1001"] == "succeeded"


def _payroll(tmp_path: Path, account: str) -> Path:
    sample = tmp_path / "payroll.csv"
    sample.write_text(
        "ref,employee_id,name,account,amount,currency,value_date\n"
        "2026-11-E1000,E1000,Ada Lovelace,GB51TEST31234094394852,357001,GBP,2026-11-30\n"
        f"2026-11-E1001,E1001,Grace Hopper,{account},580584,GBP,2026-11-30\n",
        encoding="utf-8",
    )
    return sample
