"""Attacks on what one call learns and what every call of a client shares: a call's
learnt state (maybe applied, a server's not-before, a challenge) must never reach the
next call, in the same thread or another, and the profile's facts worked out for one
request (its endpoint's key header, whether it is an operation at all) must never be
used for another request with another method or path.

Through `Client` and `wrap()`, against scripted transports, counting what was sent.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
    wrap,
)

PAYMENT = {"amount": 700, "currency": "EUR"}


class Script:
    """Answers each operation (by its `reference`) as scripted, then 201; notes what
    each attempt carried."""

    def __init__(self, script: dict[str, list[int | type[httpx.TransportError]]]) -> None:
        self.script = script
        self.sent: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        reference = request.url.params.get("ref", "")
        self.sent.append((reference, request.headers.get("idempotency-key")))
        steps = self.script.get(reference, [])
        step = steps.pop(0) if steps else 201
        if isinstance(step, type):
            raise step("scripted", request=request)
        if step == 503:
            return httpx.Response(503, headers={"Retry-After": "3600"})
        return httpx.Response(step, json={"id": f"pay_{reference}"})


def test_what_one_call_learnt_never_reaches_the_next_one(tmp_path: Path) -> None:
    # One client, calls in sequence: an attempt that may have been applied, a server's
    # not-before an hour away, a 401 handed back. Each next operation starts from
    # nothing: a 503 of its own is NotSent (never "maybe applied"), and a fresh one is
    # sent at once (never held by another operation's not-before).
    clock = ManualClock()
    psp = Script({"a": [httpx.ReadTimeout], "b": [503], "c": [503], "e": [401]})
    with Client(
        base_url="https://psp.test",
        transport=httpx.MockTransport(psp),
        store=tmp_path / "s.db",
        clock=clock,
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        with pytest.raises(Indeterminate):
            client.post("/v1/payments?ref=a", json=PAYMENT)
        with pytest.raises(NotSent) as b:
            client.post("/v1/payments?ref=b", json=PAYMENT)
        assert not b.value.outcome.maybe_applied
        with pytest.raises(NotSent) as c:
            client.post("/v1/payments?ref=c", json=PAYMENT)
        assert c.value.outcome.not_before is not None
        d = client.post("/v1/payments?ref=d", json=PAYMENT)
        assert (d.state, d.attempts, d.not_before) == (State.SUCCEEDED, 1, None)
        with pytest.raises(NotSent) as e:
            client.post("/v1/payments?ref=e", json=PAYMENT)
        assert e.value.outcome.last_status == 401
        f = client.post("/v1/payments?ref=f", json=PAYMENT)
        assert (f.state, f.status_code, f.evidence) == (State.SUCCEEDED, 201, "HTTP 201 Created")
    sent = [reference for reference, _ in psp.sent]
    assert sent == ["a", "b", "c", "d", "e", "f"]  # each once, none held back
    assert len({key for _, key in psp.sent}) == 6  # a key of its own each


def test_many_threads_on_two_endpoints_each_request_carries_its_own_endpoints_key(
    tmp_path: Path,
) -> None:
    # Razorpay reads a payout's key in X-Payout-Idempotency and a direct transfer's in
    # X-Transfer-Idempotency, and no key anywhere else (a refund is no operation). One
    # client, eight threads, the three interleaved, every other operation retried once
    # after a 503: a transfer sent with the payout's header (or a refund judged an
    # operation, or a payout judged none) by facts worked out for another request
    # would carry no key its server reads, and its retry would be a second transfer.
    seen: list[tuple[str, str, dict[str, str]]] = []
    lock = threading.Lock()
    refund = "/v1/payments/pay_1/refund"

    def psp(request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.endswith("-idempotency")}
        ref = request.url.params["ref"]
        with lock:
            first = all(seen_ref != ref for _, seen_ref, _ in seen)
            seen.append((request.url.path, ref, headers))
        if first and request.url.path != refund and int(ref.split("-")[1]) % 2:
            return httpx.Response(503)
        return httpx.Response(200, json={"id": ref})

    http = wrap(
        httpx.Client(transport=httpx.MockTransport(psp), base_url="https://api.razorpay.com"),
        store=tmp_path / "s.db",
        profile="razorpay",
        clock=ManualClock(),
        policy=RetryPolicy(max_attempts=2, initial_backoff=0.0),
    )
    paths = ["/v1/payouts", "/v1/transfers", refund]
    errors: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            for n in range(30):
                path = paths[(thread + n) % 3]
                response = http.post(path, params={"ref": f"{thread}-{n}"}, json={"amount": 1})
                assert response.status_code == 200
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    http.close()
    assert errors == []
    expected = {
        "/v1/payouts": {"x-payout-idempotency"},
        "/v1/transfers": {"x-transfer-idempotency"},
        refund: set(),
    }
    assert [(p, h) for p, _, h in seen if set(h) != expected[p]] == []
    retried = [ref for path, ref, _ in seen if path != refund and int(ref.split("-")[1]) % 2]
    assert len(seen) == 240 + len(retried) // 2  # each retried operation sent twice
    by_ref: dict[str, set[str]] = {}
    for _, ref, headers in seen:
        by_ref.setdefault(ref, set()).update(headers.values())
    assert all(len(keys) <= 1 for keys in by_ref.values())  # one key per operation


@pytest.mark.parametrize(
    ("asked", "sent", "keyed"), [("POST", "GET", False), ("GET", "POST", True)]
)
def test_a_request_hook_that_changes_the_method_is_judged_by_the_method_it_sends(
    tmp_path: Path, asked: str, sent: str, keyed: bool
) -> None:
    # The same request object, its URL object unchanged, another method: facts kept for
    # the request as it was asked (POST: a payout, keyed) must not be used for what is
    # sent (GET: a read, no key), nor the other way round (a payout sent with no key,
    # which its retry would make a second payout).
    def turn(request: httpx.Request) -> None:
        request.method = sent

    methods: list[tuple[str, str | None]] = []

    def psp(request: httpx.Request) -> httpx.Response:
        methods.append((request.method, request.headers.get("x-payout-idempotency")))
        return httpx.Response(200, json={"id": "pout_1"})

    http = wrap(
        httpx.Client(
            transport=httpx.MockTransport(psp),
            base_url="https://api.razorpay.com",
            event_hooks={"request": [turn]},
        ),
        store=tmp_path / "s.db",
        profile="razorpay",
    )
    response = http.request(asked, "/v1/payouts", json={"amount": 1})
    assert response.status_code == 200
    assert [method for method, _ in methods] == [sent]
    assert (methods[0][1] is not None) is keyed
    http.close()
