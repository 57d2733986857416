"""The sync client against a stateful stand-in server: keys, retries, outcomes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx

import idemclient
from idemclient import (
    Client,
    Indeterminate,
    KeyConflict,
    ManualClock,
    NotSent,
    ReconcileRequired,
    RetryPolicy,
    State,
)
from idemclient._errors import Rejected
from idemclient._retrofit import transport_of
from idemclient.clock import set_testing
from idemclient.errors import InvalidKey, OperationMismatch, RequestNotReplayable
from idemclient.hooks import Hooks
from idemclient.policy import RetryBudget
from idemclient.store import SQLiteStore
from idemclient.transport import IdempotentTransport

from .fakes import OK, FakePSP, error, status

PAYMENT = {"amount": 1999, "currency": "EUR", "reference": "order-1042"}


def make_client(
    psp: FakePSP, store: Path | SQLiteStore, clock: ManualClock, **options: object
) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=psp.transport(),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        **options,  # type: ignore[arg-type]
    )


# -- keys ------------------------------------------------------------------------------


def test_one_key_for_every_attempt_and_one_effect(client: Client, psp: FakePSP) -> None:
    psp.script = [error(httpx.ReadTimeout, apply=True), status(503), status(500), OK]
    outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 4
    assert outcome.replayed  # the first attempt did the work; the server said so
    assert len(set(psp.keys)) == 1
    assert None not in psp.keys
    assert psp.effects == {outcome.key: 1}


def test_no_key_is_minted_inside_the_retry_loop(
    client: Client, psp: FakePSP, monkeypatch: pytest.MonkeyPatch
) -> None:
    minted: list[str] = []
    real = idemclient._intent.new_key

    def counting() -> str:
        minted.append(real())
        return minted[-1]

    monkeypatch.setattr(idemclient._intent, "new_key", counting)
    psp.script = [status(503), status(429), error(httpx.ConnectError), OK]
    outcome = client.post("/v1/payments", json=PAYMENT)
    assert minted == [outcome.key]
    assert set(psp.keys) == {outcome.key}


def test_a_callers_key_is_sent_as_given(client: Client, psp: FakePSP) -> None:
    outcome = client.post("/v1/payments", json=PAYMENT, key="order-1042:charge")
    assert outcome.key == "order-1042:charge"
    assert psp.keys == ["order-1042:charge"]
    assert outcome.operation_id == "order-1042:charge"


def test_an_identity_gives_the_same_key_everywhere(
    tmp_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    identity = ("payroll-2026-11", "E1000", "payout", "2026-11-30")
    with make_client(psp, tmp_path / "a.db", clock) as first:
        key_a = first.post("/v1/payouts", json=PAYMENT, identity=identity).key
    with make_client(psp, tmp_path / "b.db", clock) as second:  # no shared state at all
        outcome = second.post("/v1/payouts", json=PAYMENT, identity=identity)
    assert outcome.key == key_a == idemclient.key_from_identity(*identity)
    assert outcome.replayed
    assert psp.effects == {key_a: 1}


@pytest.mark.parametrize(
    "key", ["", "x" * 256, "naïve", "a b", "k\n", "'; DROP TABLE operations;--"]
)
def test_an_invalid_key_fails_before_anything_is_recorded_or_sent(
    client: Client, psp: FakePSP, key: str
) -> None:
    with pytest.raises(InvalidKey):
        client.post("/v1/payments", json=PAYMENT, key=key)
    assert psp.requests == []
    assert client.store.operations() == []


def test_an_invalid_key_header_is_refused_too(client: Client, psp: FakePSP) -> None:
    with pytest.raises(InvalidKey):
        client.post("/v1/payments", json=PAYMENT, headers={"Idempotency-Key": "bad key"})
    assert psp.requests == []


@pytest.mark.parametrize("operation_id", ["", "x" * 1025, b"order-1042", 1042])
def test_an_invalid_operation_id_fails_before_anything_is_recorded_or_sent(
    client: Client, psp: FakePSP, operation_id: object
) -> None:
    # An empty id (a field missing from the caller's row) was read as no id at all:
    # every call made a new key, so issuing "it" again paid again. Bytes were stored as
    # another id than the same text; a number failed deep inside without naming it.
    for _ in range(2):
        with pytest.raises(InvalidKey, match="operation_id"):
            client.post("/v1/payments", json=PAYMENT, operation_id=operation_id)  # type: ignore[arg-type]
    assert psp.requests == []
    assert client.store.operations() == []


@pytest.mark.parametrize("reference", [1042, b"order-1042"])
def test_a_reference_that_is_no_string_fails_before_anything_is_recorded_or_sent(
    client: Client, psp: FakePSP, reference: object
) -> None:
    # Stored as it came (a number as text, bytes as a blob), a look-up by it would ask
    # for another value than the one the request carries.
    with pytest.raises(TypeError, match=r"reference= must be a string"):
        client.post("/v1/payments", json=PAYMENT, reference=reference)  # type: ignore[arg-type]
    assert psp.requests == []
    assert client.store.operations() == []


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        (idemclient.AsyncClient, httpx.Client, "httpx.AsyncClient for AsyncClient"),
        (idemclient.Client, httpx.AsyncClient, "httpx.Client for Client"),
    ],
)
def test_an_http_client_of_the_other_kind_is_refused_at_once(
    tmp_path: Path, ours: type, theirs: type, expected: str
) -> None:
    # Accepted, it failed only at the first call, deep inside httpx.
    given = theirs()
    with pytest.raises(TypeError, match=expected):
        ours(store=tmp_path / "s.db", http=given)
    assert not given.is_closed  # the caller's, left as it was


def test_key_and_identity_together_are_refused(client: Client) -> None:
    with pytest.raises(ValueError, match="key= or identity="):
        client.post("/v1/payments", json=PAYMENT, key="k", identity="i")


# -- re-issuing an operation -----------------------------------------------------------


def test_a_finished_operation_is_answered_from_the_store(client: Client, psp: FakePSP) -> None:
    first = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    again = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert len(psp.requests) == 1
    assert again.from_store
    assert not first.from_store
    assert again.key == first.key
    assert again.response is not None
    assert first.response is not None
    assert again.response.content == first.response.content
    assert again.state is State.SUCCEEDED


def test_a_different_body_for_the_same_operation_raises_before_sending(
    client: Client, psp: FakePSP
) -> None:
    client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    with pytest.raises(OperationMismatch, match="differs in its body"):
        client.post("/v1/payments", json={**PAYMENT, "amount": 1}, operation_id="order-1042")
    assert len(psp.requests) == 1


def test_an_unfinished_operation_is_resumed_with_its_key(client: Client, psp: FakePSP) -> None:
    psp.script = [error(httpx.ReadTimeout, apply=True)] * 8
    with pytest.raises(Indeterminate) as caught:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    key = caught.value.key
    outcome = client.post("/v1/payments", json=PAYMENT, operation_id="order-1042")
    assert outcome.key == key
    assert outcome.replayed
    assert outcome.attempts == 9  # counted across both calls
    assert psp.effects == {key: 1}


# -- outcomes ----------------------------------------------------------------------------


def test_read_timeouts_end_indeterminate_never_failed(client: Client, psp: FakePSP) -> None:
    psp.script = [error(httpx.ReadTimeout, apply=True)] * 8
    with pytest.raises(Indeterminate) as caught:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    error_ = caught.value
    assert not isinstance(error_, Rejected)
    assert error_.outcome.state is State.INDETERMINATE
    assert error_.outcome.maybe_applied
    assert error_.operation_id == "order-1"
    assert "ReadTimeout" in error_.evidence
    assert isinstance(error_.__cause__, httpx.ReadTimeout)
    record = client.store.get("order-1")
    assert record is not None
    assert record.state is State.INDETERMINATE
    assert record.lease_owner is None  # released for whoever resumes it


def test_connect_errors_end_not_sent(client: Client, psp: FakePSP) -> None:
    psp.script = [error(httpx.ConnectError)] * 8
    with pytest.raises(NotSent) as caught:
        client.post("/v1/payments", json=PAYMENT)
    assert caught.value.outcome.state is State.NOT_SENT
    assert not caught.value.outcome.maybe_applied
    assert len(psp.requests) == 8  # max_attempts


def test_one_maybe_applied_attempt_makes_the_end_indeterminate(
    client: Client, psp: FakePSP
) -> None:
    psp.script = [error(httpx.ReadTimeout), *[error(httpx.ConnectError)] * 7]
    with pytest.raises(Indeterminate):
        client.post("/v1/payments", json=PAYMENT)


def test_a_final_refusal_is_an_answer_not_an_exception(client: Client, psp: FakePSP) -> None:
    psp.script = [status(402)]
    outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.FAILED
    assert outcome.status_code == 402
    assert len(psp.requests) == 1


def test_a_refused_credential_ends_not_sent_so_the_operation_can_be_resent(
    client: Client, psp: FakePSP
) -> None:
    psp.script = [status(401)]
    with pytest.raises(NotSent, match="HTTP 401"):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert len(psp.requests) == 1  # not retried: the same token would be refused again
    outcome = client.post("/v1/payments", json=PAYMENT, operation_id="op")  # fixed token
    assert outcome.succeeded
    assert psp.keys[0] == psp.keys[1]


def test_422_is_a_loud_key_conflict(client: Client, psp: FakePSP) -> None:
    psp.script = [status(422)]
    with pytest.raises(KeyConflict, match="different request") as caught:
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert isinstance(caught.value, Rejected)
    assert caught.value.outcome.state is State.FAILED
    record = client.store.get("op")
    assert record is not None
    assert record.state is State.FAILED


def test_202_is_polled_and_ends_indeterminate_without_a_final_answer(
    client: Client, psp: FakePSP
) -> None:
    psp.script = [status(202)] * 8
    with pytest.raises(Indeterminate):
        client.post("/v1/payments", json=PAYMENT)
    assert len(psp.requests) == 8


def test_202_then_final_answer_succeeds(client: Client, psp: FakePSP) -> None:
    psp.script = [status(202), status(409, retry_after="1")]
    outcome = client.post("/v1/payments", json=PAYMENT)
    assert outcome.state is State.SUCCEEDED
    assert outcome.attempts == 3


def test_a_tls_verification_failure_is_not_retried(client: Client, psp: FakePSP) -> None:
    from tests.unit.test_classify import tls_failure

    def handler(request: httpx.Request) -> httpx.Response:
        psp.requests.append(request)
        raise tls_failure()

    transport = transport_of(client.http)
    assert isinstance(transport, IdempotentTransport)
    transport.inner = httpx.MockTransport(handler)
    with pytest.raises(NotSent) as caught:
        client.post("/v1/payments", json=PAYMENT)
    # The payment once, and nothing else (no time probe by default).
    assert [r.method for r in psp.requests] == ["POST"]
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# -- waiting ---------------------------------------------------------------------------


def test_retry_after_is_a_floor_in_every_form(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [
        status(503, retry_after="3"),
        status(429, retry_after_ms="1500"),
        status(503, retry_after="Fri, 15 Jan 2027 08:00:12 GMT"),
        OK,
    ]
    client.post("/v1/payments", json=PAYMENT)
    assert clock.sleeps[0] >= 3.0
    assert clock.sleeps[1] >= 1.5
    # The date is read at the time of the third answer: 12 s after the clock's start,
    # minus the 4.5+ s already slept.
    assert clock.sleeps[2] >= 12.0 - clock.sleeps[0] - clock.sleeps[1] - 1e-6


def test_garbage_retry_after_falls_back_to_backoff(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [status(503, retry_after="soon"), status(503, retry_after="-5"), OK]
    assert client.post("/v1/payments", json=PAYMENT).succeeded
    assert all(0 <= wait <= 0.5 for wait in clock.sleeps)


def test_a_server_wait_past_the_deadline_stops_now_and_resume_honours_it(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [status(503, retry_after="3600")]
    with pytest.raises(NotSent) as caught:
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert clock.sleeps == []  # never slept towards an unreachable retry
    not_before = caught.value.outcome.not_before
    assert not_before == pytest.approx(clock.time() + 3600)
    # Re-issued early: refused without a network call, never retried early.
    clock.advance(60)
    with pytest.raises(NotSent):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert len(psp.requests) == 1
    clock.advance(3600)
    assert client.post("/v1/payments", json=PAYMENT, operation_id="op").succeeded


def test_a_short_remaining_server_wait_is_slept_then_sent(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [status(503, retry_after="70")]
    with pytest.raises(NotSent):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    clock.advance(50)
    assert client.post("/v1/payments", json=PAYMENT, operation_id="op").succeeded
    assert clock.sleeps == [pytest.approx(20.0)]


def test_each_attempt_timeout_shrinks_to_the_time_left(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    psp.script = [status(503, retry_after="4"), status(503, retry_after="4"), OK]
    policy = RetryPolicy(deadline=10.0, attempt_timeout=30.0)
    with make_client(
        psp, store_path, clock, policy=policy, timeout=httpx.Timeout(5.0, read=8.0)
    ) as c:
        c.post("/v1/payments", json=PAYMENT)
    timeouts = psp.timeouts
    assert timeouts[0] == {"connect": 5.0, "read": 8.0, "write": 5.0, "pool": 5.0}
    assert timeouts[1]["read"] == pytest.approx(10.0 - clock.sleeps[0])
    assert timeouts[2]["read"] == pytest.approx(10.0 - sum(clock.sleeps))
    assert timeouts[2]["connect"] == pytest.approx(10.0 - sum(clock.sleeps))


def test_the_deadline_bounds_attempts_and_sleeps(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    psp.script = [status(503, retry_after="2")] * 100
    policy = RetryPolicy(deadline=9.0, max_attempts=100)
    with make_client(psp, store_path, clock, policy=policy) as c, pytest.raises(NotSent):
        c.post("/v1/payments", json=PAYMENT)
    assert sum(clock.sleeps) <= 9.0
    assert len(psp.requests) == 5  # sends at 0, 2, 4, 6, 8; a wait to 10 would pass 9


def test_a_discarded_answer_is_closed_before_sleeping(store_path: Path, clock: ManualClock) -> None:
    closed_at_sleep: list[bool] = []
    streams: list[TrackedStream] = []

    class TrackedStream(httpx.SyncByteStream):
        closed = False

        def __iter__(self) -> Iterator[bytes]:
            yield b"busy"

        def close(self) -> None:
            self.closed = True

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client asks the time: answered at once
            return httpx.Response(200)
        if not streams:
            streams.append(TrackedStream())
            return httpx.Response(503, stream=streams[0])
        return httpx.Response(201, json={"id": "pay_1"})

    class WatchingClock(ManualClock):
        def sleep(self, seconds: float) -> None:
            closed_at_sleep.append(streams[0].closed)
            super().sleep(seconds)

    with Client(
        store=store_path, clock=WatchingClock(), transport=httpx.MockTransport(handler)
    ) as c:
        assert c.post("http://psp.test/v1/payments", json=PAYMENT).succeeded
    assert closed_at_sleep == [True]


def test_the_retry_budget_stops_a_storm(store_path: Path, clock: ManualClock, psp: FakePSP) -> None:
    psp.script = [status(503)] * 100
    budget = RetryBudget(capacity=10)  # two retries at 5 tokens each
    with make_client(psp, store_path, clock, budget=budget) as c:
        with pytest.raises(NotSent, match="retry budget"):
            c.post("/v1/payments", json=PAYMENT)
        assert len(psp.requests) == 3
        with pytest.raises(NotSent, match="retry budget"):
            c.post("/v1/payments", json=PAYMENT)  # shared by every call of the client
        assert len(psp.requests) == 4
    assert budget.tokens == 0


def test_an_operation_the_budget_stopped_says_so_in_its_record_outcome_and_log(
    store_path: Path, clock: ManualClock, psp: FakePSP, caplog: pytest.LogCaptureFixture
) -> None:
    psp.script = [status(503)] * 100
    with make_client(psp, store_path, clock, budget=RetryBudget(capacity=5)) as c:
        with (
            caplog.at_level(logging.WARNING, logger="idemclient"),
            pytest.raises(NotSent) as raised,
        ):
            c.post("/v1/payments", json=PAYMENT, operation_id="op")
        stored = c.operation("op")
    said = "stopped by the client's retry budget"
    assert raised.value.outcome.evidence.endswith(said)
    assert stored is not None
    assert stored.evidence.endswith(said)
    assert said in caplog.text


def test_an_operation_older_than_the_servers_key_retention_is_not_resent(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [error(httpx.ReadTimeout, apply=True)] * 8
    with pytest.raises(Indeterminate):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    clock.advance(25 * 3600)
    with pytest.raises(ReconcileRequired, match="key retention"):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    assert len(psp.requests) == 8


def test_a_never_sent_operation_may_be_sent_after_any_time(
    client: Client, psp: FakePSP, clock: ManualClock
) -> None:
    psp.script = [error(httpx.ConnectError)] * 8
    with pytest.raises(NotSent):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    clock.advance(30 * 24 * 3600)
    assert client.post("/v1/payments", json=PAYMENT, operation_id="op").succeeded


# -- bodies ----------------------------------------------------------------------------


def test_a_streamed_body_is_buffered_and_sent_whole_on_every_attempt(
    client: Client, psp: FakePSP
) -> None:
    psp.script = [error(httpx.ReadTimeout), OK]

    def chunks() -> Iterator[bytes]:
        yield b'{"amount": '
        yield b"100}"

    client.post("/v1/payments", content=chunks())
    assert [r.content for r in psp.requests] == [b'{"amount": 100}'] * 2


def test_a_body_too_large_to_buffer_is_refused_before_anything(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"x" * 600
        yield b"x" * 600

    with make_client(psp, store_path, clock, max_request_body=1000) as c:
        with pytest.raises(RequestNotReplayable, match="max_request_body"):
            c.post("/v1/payments", content=chunks())
        assert c.store.operations() == []
    assert psp.requests == []


# -- privacy ---------------------------------------------------------------------------


def test_no_secret_reaches_the_store_file(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    psp.script = [error(httpx.ReadTimeout), OK]
    store = SQLiteStore(store_path, secret_headers={"X-Signature"})
    with Client(
        store=store,
        clock=clock,
        transport=psp.transport(),
        base_url="http://psp.test",
        auth=("merchant", "basic_auth_secret"),
        cookies={"session": "cookie_jar_secret"},
        headers={"X-Signature": "signature_secret", "Proxy-Authorization": "proxy_secret"},
    ) as c:
        c.post("/v1/payments", json=PAYMENT, headers={"Cookie": "explicit_cookie_secret"})
        c.post("/v1/payments", json=PAYMENT, headers={"Authorization": "Bearer bearer_secret"})
    store.close()
    raw = b"".join(p.read_bytes() for p in store_path.parent.glob("client.db*"))
    assert b"order-1042" in raw  # the bytes checked are the store's
    for secret in [
        b"basic_auth_secret",
        b"bWVyY2hhbnQ6YmFzaWNfYXV0aF9zZWNyZXQ",
        b"cookie_jar_secret",
        b"signature_secret",
        b"proxy_secret",
        b"explicit_cookie_secret",
        b"bearer_secret",
    ]:
        assert secret not in raw, secret


def test_credentials_in_the_url_are_not_stored(client: Client, psp: FakePSP) -> None:
    outcome = client.post("http://user:url_secret@psp.test/v1/payments", json=PAYMENT)
    record = client.store.get(outcome.operation_id)
    assert record is not None
    assert "url_secret" not in record.url


# -- hooks, logging, testing mode -------------------------------------------------------


def test_hooks_see_every_attempt_retry_and_outcome(
    store_path: Path, clock: ManualClock, psp: FakePSP, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    hooks = Hooks(
        on_attempt=lambda e: seen.append(f"attempt {e.attempt}"),
        on_retry=lambda e: seen.append(f"retry after {e.evidence}"),
        on_outcome=lambda o: seen.append(f"outcome {o.state}"),
    )
    psp.script = [status(503), OK]
    with (
        caplog.at_level(logging.DEBUG, logger="idemclient"),
        make_client(psp, store_path, clock, hooks=hooks) as c,
    ):
        c.post("/v1/payments", json=PAYMENT)
    assert seen == [
        "attempt 1",
        "retry after HTTP 503 Service Unavailable",
        "attempt 2",
        "outcome succeeded",
    ]
    messages = [r.getMessage() for r in caplog.records if r.name == "idemclient"]
    assert any("retrying operation" in m for m in messages)
    assert any("succeeded after 2 attempt(s)" in m for m in messages)


def test_indeterminate_is_logged_as_a_warning(
    client: Client, psp: FakePSP, caplog: pytest.LogCaptureFixture
) -> None:
    psp.script = [error(httpx.ReadTimeout)] * 8
    with caplog.at_level(logging.WARNING, logger="idemclient"), pytest.raises(Indeterminate):
        client.post("/v1/payments", json=PAYMENT)
    assert any("indeterminate" in r.getMessage() for r in caplog.records)


def test_testing_mode_removes_real_sleeps(store_path: Path, psp: FakePSP) -> None:
    import time

    psp.script = [status(503, retry_after="30"), OK]
    set_testing(True)
    try:
        started = time.monotonic()
        with Client(store=store_path, transport=psp.transport(), base_url="http://psp.test") as c:
            assert c.post("/v1/payments", json=PAYMENT).succeeded
        assert time.monotonic() - started < 5
    finally:
        set_testing(False)


# -- interruption ------------------------------------------------------------------------


def test_an_interrupted_call_leaves_a_truthful_record_and_no_lease(
    client: Client, psp: FakePSP
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            return httpx.Response(200)
        raise KeyboardInterrupt

    transport = transport_of(client.http)
    assert isinstance(transport, IdempotentTransport)
    transport.inner = httpx.MockTransport(handler)
    with pytest.raises(KeyboardInterrupt):
        client.post("/v1/payments", json=PAYMENT, operation_id="op")
    record = client.store.get("op")
    assert record is not None
    assert record.state is State.INDETERMINATE  # it was on the wire when cut short
    assert record.lease_owner is None
    assert "KeyboardInterrupt" in record.evidence


def test_an_interrupt_while_asking_the_time_records_and_sends_nothing(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    # Cut short during the time probe (with time_probe=True, the HEAD before a
    # process's first operation): nothing is recorded (no intent yet), nothing was
    # sent, and the next call asks again at once (the question was not left out for
    # others to wait on).
    methods: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        methods.append(request.method)
        if request.method == "HEAD" and methods.count("HEAD") == 1:
            raise KeyboardInterrupt
        return psp.handler(request)

    client = Client(
        store=store_path,
        clock=clock,
        transport=httpx.MockTransport(handler),
        base_url="http://psp.test",
        headers={"Authorization": "Bearer sk_test_secret"},
        time_probe=True,
    )
    with client:
        with pytest.raises(KeyboardInterrupt):
            client.post("/v1/payments", json=PAYMENT, operation_id="op")
        assert client.store.get("op") is None
        assert methods == ["HEAD"]
        assert client.post("/v1/payments", json=PAYMENT, operation_id="op").succeeded
        assert methods == ["HEAD", "HEAD", "POST"]
    assert sum(psp.effects.values()) == 1


def test_get_passes_through_without_a_key_or_a_record(client: Client, psp: FakePSP) -> None:
    client.get("/v1/payments/pay_1")
    assert psp.keys == [None]
    assert client.store.operations() == []


def test_operation_reports_what_the_store_knows(client: Client) -> None:
    assert client.operation("nope") is None
    client.post("/v1/payments", json=PAYMENT, operation_id="op")
    known = client.operation("op")
    assert known is not None
    assert known.state is State.SUCCEEDED
    assert known.from_store


# -- respx ------------------------------------------------------------------------------


def test_works_with_respx_routes(store_path: Path, clock: ManualClock) -> None:
    with respx.mock(base_url="http://psp.test", assert_all_called=True) as router:
        route = router.post("/v1/payments").mock(
            side_effect=[
                httpx.Response(503, headers={"Retry-After": "1"}),
                httpx.Response(201, json={"id": "p"}),
            ]
        )
        with Client(store=store_path, clock=clock, base_url="http://psp.test") as c:
            outcome = c.post("/v1/payments", json=PAYMENT)
    assert outcome.succeeded
    keys = {call.request.headers["idempotency-key"] for call in route.calls}
    assert keys == {outcome.key}
    assert clock.sleeps[0] >= 1.0


def test_a_new_client_reaps_the_bodies_of_finished_operations_past_retention(
    store_path: Path, clock: ManualClock, psp: FakePSP
) -> None:
    store = SQLiteStore(store_path, retention=3600)
    with make_client(psp, store, clock) as c:
        c.post("/v1/payments", json=PAYMENT, operation_id="old")
        psp.script = [error(httpx.ConnectError)] * 8
        with pytest.raises(NotSent):
            c.post("/v1/payments", json=PAYMENT, operation_id="unfinished")
    clock.advance(7200)
    with make_client(psp, store, clock) as c:
        # Reaping goes by the latest time the store had seen before this start (an
        # hour's work here): at the next start the finished operation is old enough.
        reaped = store.get("old")
        assert reaped is not None
        assert reaped.response is not None
        assert not reaped.response.body_omitted
        c.post("/v1/payments", json={**PAYMENT, "reference": "new"}, operation_id="new")
    clock.advance(60)
    with make_client(psp, store, clock) as c:
        reaped = store.get("old")
        assert reaped is not None  # its key and state stay: the id never gets another key
        assert (reaped.state, reaped.body) == (State.SUCCEEDED, b"")
        assert reaped.response is not None
        assert reaped.response.body_omitted
        unfinished = store.get("unfinished")
        assert unfinished is not None  # never reaped
        assert unfinished.body != b""
    store.close()


def test_a_file_body_is_buffered_and_resent(client: Client, psp: FakePSP, tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_bytes(b'{"amount": 42}')
    psp.script = [error(httpx.ReadTimeout)]
    with body.open("rb") as handle:
        client.post("/v1/payments", content=handle)
    assert [r.content for r in psp.requests] == [b'{"amount": 42}'] * 2
