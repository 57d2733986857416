"""A 303 See Other says where the *result* is, whatever it was: the Post/Redirect/Get
pattern sends a declined payment to an error page as it sends an accepted one to a
receipt. The GET's answer settles the operation only when it says what the payment came
to, and a 303 met after another redirect says nothing about the operation."""

from __future__ import annotations

from pathlib import Path

import httpx

from idemclient import Client, ManualClock, OutcomeError, State

from .psp import PAYMENT, PSP


def declined(psp: PSP, request: httpx.Request) -> httpx.Response | None:
    # nothing applied: the card was declined; PRG to the result page
    return httpx.Response(303, headers={"location": "/v1/results/declined"})


def result_page(psp: PSP, request: httpx.Request) -> httpx.Response | None:
    return httpx.Response(200, json={"status": "declined", "reason": "insufficient_funds"})


def test_a_303_to_a_declined_result_is_not_reported_succeeded(tmp_path: Path) -> None:
    psp = PSP(declined, result_page)
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    ) as client:
        try:
            state = client.post("/v1/payments", json=PAYMENT, operation_id="op").state
        except OutcomeError as exc:
            state = exc.outcome.state
        stored = client.operation("op")
    assert psp.total == 0  # nothing was paid
    assert stored is not None
    assert state is not State.SUCCEEDED, "a declined payment reported as paid"
    assert stored.state is not State.SUCCEEDED, "a declined payment stored as paid"


def test_a_302_to_a_login_page_that_303s_is_not_reported_succeeded(tmp_path: Path) -> None:
    """A 303 met after another redirect says nothing about the operation: a session that
    expired (302 to /login, then 303 to its form) leaves it indeterminate."""

    def to_login(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(302, headers={"location": "/login"})  # nothing applied

    def login_see_other(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(303, headers={"location": "/login/form"})

    def login_form(psp: PSP, request: httpx.Request) -> httpx.Response | None:
        return httpx.Response(200, text="<form>sign in</form>")

    psp = PSP(to_login, login_see_other, login_form)
    with Client(
        store=tmp_path / "c.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://psp.test",
        follow_redirects=True,
    ) as client:
        try:
            state = client.post("/v1/payments", json=PAYMENT, operation_id="op").state
        except OutcomeError as exc:
            state = exc.outcome.state
        stored = client.operation("op")
    assert psp.total == 0
    assert [m for m, *_ in psp.seen] == ["POST", "GET", "GET"]
    assert stored is not None
    assert (state, stored.state) == (State.INDETERMINATE, State.INDETERMINATE)
