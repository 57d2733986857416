"""What an answer means for the operation: only a 2xx is a success and only a 4xx is a
refusal; a 5xx or an unfollowed 3xx is no answer about the payment, and a refusal after
an attempt that may have been applied may be the server refusing a duplicate."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from idemclient import Client, Indeterminate, ManualClock, RetryPolicy, State

from .fakes import FakePSP, error, status

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


def client_for(psp: FakePSP, store: Path, clock: ManualClock, **policy: object) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=psp.transport(),
        base_url="http://psp.test",
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("script", "policy"),
    [
        ([status(520)], {}),  # a CDN in front of the PSP: unknown
        ([status(524)], {}),  # the CDN gave up waiting for the origin
        ([status(501)], {}),
        ([status(500)], {"retry_statuses": frozenset({429, 503})}),  # left out by the policy
        ([status(500, stripe_should_retry="false")], {"follow_server_hints": True}),
        ([status(502, x_should_retry="false")], {"follow_server_hints": True}),
        ([status(301, location="/v2/payments")], {}),  # not followed: not an answer
        ([status(308, location="/v1/payments")], {}),
    ],
)
def test_what_is_neither_success_nor_refusal_is_indeterminate(
    tmp_path: Path, script: list[object], policy: dict[str, object]
) -> None:
    psp = FakePSP(*script)  # type: ignore[arg-type]
    with (
        client_for(psp, tmp_path / "c.db", ManualClock(), **policy) as client,
        pytest.raises(Indeterminate) as raised,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert raised.value.outcome.state is State.INDETERMINATE
    assert raised.value.outcome.maybe_applied
    with client_for(psp, tmp_path / "c.db", ManualClock()) as again:
        stored = again.operation("op")
    assert stored is not None
    assert stored.state is State.INDETERMINATE  # never `failed`: never sent again blindly


def test_a_524_after_a_timeout_is_indeterminate_and_resume_pays_once(tmp_path: Path) -> None:
    psp = FakePSP(error(httpx.ReadTimeout, apply=True), status(524))
    with client_for(psp, tmp_path / "c.db", ManualClock()) as client:
        with pytest.raises(Indeterminate) as raised:
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert raised.value.outcome.last_status == 524
        [resumed] = client.resume()
    assert resumed.state is State.SUCCEEDED
    assert resumed.replayed
    assert list(psp.effects.values()) == [1]


@pytest.mark.parametrize("refusal", [422, 400, 404])
def test_a_refusal_after_an_attempt_that_may_have_been_applied_is_indeterminate(
    tmp_path: Path, refusal: int
) -> None:
    # A server that does not replay finished keys: "reference already exists".
    psp = FakePSP(error(httpx.ReadTimeout, apply=True), status(refusal))
    with (
        client_for(psp, tmp_path / "c.db", ManualClock()) as client,
        pytest.raises(Indeterminate) as raised,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    outcome = raised.value.outcome
    assert (outcome.state, outcome.maybe_applied, outcome.last_status) == (
        State.INDETERMINATE,
        True,
        refusal,
    )
    assert "refusing a duplicate" in outcome.evidence
    assert list(psp.effects.values()) == [1]


def test_a_refusal_after_maybe_applied_is_final_where_the_server_replays(tmp_path: Path) -> None:
    psp = FakePSP(error(httpx.ReadTimeout), status(402))
    with client_for(psp, tmp_path / "c.db", ManualClock(), server_replays=True) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.status_code) == (State.FAILED, 402)


def test_a_refusal_marked_as_the_stored_answer_is_final(tmp_path: Path) -> None:
    psp = FakePSP(error(httpx.ReadTimeout), status(402, idempotent_replayed="true"))
    with client_for(psp, tmp_path / "c.db", ManualClock()) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.status_code, outcome.replayed) == (State.FAILED, 402, True)


def test_a_first_refusal_is_final(tmp_path: Path) -> None:
    psp = FakePSP(status(402))
    with client_for(psp, tmp_path / "c.db", ManualClock()) as client:
        outcome = client.post("/v1/payments", json=PAYMENT)
    assert (outcome.state, outcome.status_code) == (State.FAILED, 402)
    assert not psp.effects
