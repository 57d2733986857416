"""Submitting a batch through the Python API, against the reference server in process
(its `transport`, a `ManualClock` shared by client and server: nothing sleeps)."""

from __future__ import annotations

import csv
import inspect
import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idemclient import (
    AsyncClient,
    Client,
    ManualClock,
    RetryPolicy,
    State,
    key_from_identity,
    profiles,
)
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch, BatchInvalid, BatchProgress, ExitCode, asubmit, submit
from idemclient.testing import ReferenceServer

from ..support.shop import shop_client

DAY = 86_400.0


def make_batch(
    n: int = 30,
    *,
    amount: int = 100,
    reference: str | None = None,
    value_date: str = "2026-11-30",
) -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": amount + i, "currency": "GBP", "value_date": value_date}
            for i in range(n)
        ],
        reference=reference,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as running:
        yield running


class Requests:
    """Every request the client made, by method (an httpx event hook)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> None:
        with self.lock:
            self.seen[request.method] += 1


def make_client(
    server: ReferenceServer,
    store: Path,
    clock: ManualClock,
    requests: Requests | None = None,
    **policy: float,
) -> Client:
    return Client(
        store=store,
        clock=clock,
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
        event_hooks={"request": [requests]} if requests else None,
    )


def test_every_row_is_paid_once_under_its_reference(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    with make_client(server, tmp_path / "s.db", clock) as client:
        report = submit(make_batch(30), client, concurrency=4)
        record = client.store.get("batch/payout/E0000")
    assert report.exit_code is ExitCode.OK
    ledger = server.ledger()
    assert sorted(e.reference for e in ledger) == [f"E{i:04d}" for i in range(30)]
    first = report.rows[0]
    assert first.key == key_from_identity("E0000", "payout")
    assert (first.row, first.ref, first.state, first.http_status) == (1, "E0000", "succeeded", 201)
    assert first.resource_id is not None
    assert first.resource_id.startswith("po_")
    assert first.reason == "sent now"
    assert record is not None
    assert (record.key, record.reference) == (first.key, "E0000")


def test_the_same_batch_twice_makes_no_new_effect_and_no_request(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    requests = Requests()
    with make_client(server, tmp_path / "s.db", clock, requests) as client:
        submit(make_batch(), client)
        before = requests.seen.copy()
        again = submit(make_batch(), client)
    assert requests.seen == before  # finished rows are answered from the store
    assert again.exit_code is ExitCode.OK
    assert all(row.already_done and not row.replayed for row in again.rows)
    assert len(server.ledger()) == 30


def test_a_scope_makes_repeating_references_distinct_payments(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    with make_client(server, tmp_path / "s.db", clock) as client:
        november = submit(make_batch(5, reference="2026-11"), client)
        december = submit(
            make_batch(5, reference="2026-12", value_date="2026-12-31", amount=200), client
        )
        # Unscoped, the references are payments of their own; a second month of them
        # without a scope is refused, and the refusal says how to scope them.
        submit(make_batch(5, value_date="2027-01-31", amount=300), client)
        with pytest.raises(BatchInvalid, match="--batch-ref"):
            submit(make_batch(5, value_date="2027-02-28", amount=300), client)
    assert november.exit_code is december.exit_code is ExitCode.OK
    assert november.rows[0].ref == "2026-11/E0000"
    assert november.rows[0].key == key_from_identity("2026-11/E0000", "payout")
    references = Counter(e.reference for e in server.ledger())
    assert references["2026-11/E0000"] == references["2026-12/E0000"] == 1
    assert references["E0000"] == 1
    assert len(server.ledger()) == 15


def test_the_same_batch_from_another_store_is_found_by_look_up_and_not_sent(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    with make_client(server, tmp_path / "a.db", clock) as first:
        submit(make_batch(), first)
    server.advance(2 * DAY)
    assert server.reap() > 0  # the server has forgotten the keys
    requests = Requests()
    with make_client(server, tmp_path / "b.db", clock, requests) as second:
        report = submit(make_batch(), second)
        record = second.store.get("batch/payout/E0003")
    assert requests.seen["POST"] == 0
    assert requests.seen["GET"] == 30
    assert report.exit_code is ExitCode.OK
    assert all(row.already_done and not row.replayed for row in report.rows)
    assert "30 found on the server by look-up" in report.summary()
    assert len(server.ledger()) == 30
    assert record is not None
    assert record.state is State.SUCCEEDED
    assert "found by look-up before sending" in record.evidence


def test_without_a_look_up_a_fresh_store_pays_again_what_the_server_forgot(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    # What lookup=None (--no-lookup) risks, shown: the documented hazard, not a promise.
    with make_client(server, tmp_path / "a.db", clock) as first:
        submit(make_batch(3), first)
    server.advance(2 * DAY)
    server.reap()
    with make_client(server, tmp_path / "b.db", clock) as second:
        submit(make_batch(3), second, lookup=None)
    assert len(server.ledger()) == 6


def test_a_row_changed_after_submission_is_refused_before_sending(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    requests = Requests()
    with make_client(server, tmp_path / "s.db", clock, requests) as client:
        submit(make_batch(5), client)
        before = requests.seen.copy()
        changed = make_batch(6, amount=999, value_date="2026-12-01")  # rows 1..5 changed
        with pytest.raises(BatchInvalid) as caught:
            submit(changed, client)
        assert requests.seen == before
        assert client.store.get("batch/payout/E0005") is None
    problems = caught.value.problems
    assert [row for row, _ in problems] == [0, 1, 2, 3, 4, 5]
    assert "--batch-ref" in problems[0][1]
    assert problems[1][1] == (
        "reference 'E0000' was submitted before with other content: amount 100 -> 999;"
        " value_date '2026-11-30' -> '2026-12-01'"
    )


def test_faults_are_retried_and_unsettled_rows_say_run_again(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(503, retry_after=1, key=key_from_identity("E0001", "payout"))
    server.drop(key=key_from_identity("E0002", "payout"))
    server.answer(429, key=key_from_identity("E0003", "payout"))
    with make_client(server, tmp_path / "s.db", clock) as client:
        report = submit(make_batch(10), client, concurrency=1)
        assert report.exit_code is ExitCode.OK
        assert sum(r.attempts for r in report.rows) == 13
        server.drop(times=8, key=key_from_identity("E0010", "payout"))  # never an answer
        stuck = submit(make_batch(11), client, concurrency=1)
    assert stuck.exit_code is ExitCode.RUN_AGAIN
    assert stuck.rows[-1].state == "indeterminate"
    assert stuck.rows[-1].reason.startswith("may have been applied")
    assert len(server.ledger()) == 11


def test_a_final_refusal_gives_exit_code_4(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(400, key=key_from_identity("E0000", "payout"))
    with make_client(server, tmp_path / "s.db", clock) as client:
        report = submit(make_batch(3), client, concurrency=1)
    assert report.exit_code is ExitCode.FAILED
    assert [r.state for r in report.rows] == ["failed", "succeeded", "succeeded"]
    assert report.rows[0].reason.startswith("refused by the server (HTTP 400")


def test_refused_credentials_stop_new_rows_and_are_counted_honestly(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(401, key=key_from_identity("E0000", "payout"))
    requests = Requests()
    with make_client(server, tmp_path / "s.db", clock, requests) as client:
        report = submit(make_batch(20), client, concurrency=1)
        assert requests.seen["POST"] == 1  # nothing more started after the refusal
        assert report.exit_code is ExitCode.BAD_INPUT
        assert {r.state for r in report.rows} == {"not_sent"}
        assert not any(r.replayed for r in report.rows)  # never sent is not "replayed"
        assert "0 replayed" in report.summary()
        assert "check the token" in report.summary()
        assert "19 not started after the server refused the token" in report.summary()
        again = submit(make_batch(20), client, concurrency=1)  # "the right token"
    assert again.exit_code is ExitCode.OK
    assert len(server.ledger()) == 20


def test_progress_is_reported_live(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    server.answer(503, key=key_from_identity("E0002", "payout"))
    seen: list[BatchProgress] = []
    lock = threading.Lock()

    def record(progress: BatchProgress) -> None:
        with lock:
            seen.append(progress)

    with make_client(server, tmp_path / "s.db", clock) as client:
        submit(make_batch(5), client, concurrency=1, on_progress=record)
    assert any(p.retrying == 1 for p in seen)
    last = seen[-1]
    assert (last.total, last.done, last.succeeded, last.retrying) == (5, 5, 5, 0)


def test_reports_are_written_as_csv_or_json(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    with make_client(server, tmp_path / "s.db", clock) as client:
        report = submit(make_batch(3), client)
    report.write(tmp_path / "r.csv")
    report.write(tmp_path / "r.json")
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "row", "ref", "key", "state", "http_status", "resource_id", "attempts", "replayed",
        "reason", "already_done", "reconcile",
    ]  # fmt: skip
    as_json = json.loads((tmp_path / "r.json").read_text())
    assert [r["ref"] for r in as_json["rows"]] == [r["ref"] for r in rows]
    assert [r["ref"] for r in rows] == ["E0000", "E0001", "E0002"]
    meta = as_json["batch"]
    assert (meta["source"], meta["batch_reference"], meta["path"]) == (
        "<records>",
        None,
        "/v1/payouts",
    )
    assert meta["lookup"] == "/v1/payouts?reference={reference}"
    assert (meta["exit_code"], meta["counts"]["succeeded"]) == (0, 3)
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        report.write(tmp_path / "r.txt")
    assert "3 rows, 3 succeeded" in report.summary()


@pytest.mark.anyio
async def test_async_submit(server: ReferenceServer, clock: ManualClock, tmp_path: Path) -> None:
    server.answer(503, key=key_from_identity("E0001", "payout"))
    server.drop(key=key_from_identity("E0002", "payout"))
    async with AsyncClient(
        store=tmp_path / "s.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as client:
        report = await asubmit(make_batch(25), client, concurrency=5)
        again = await asubmit(make_batch(25), client, concurrency=5)
        assert client.store.counts()[State.SUCCEEDED] == 25
    async with AsyncClient(
        store=tmp_path / "other.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as fresh:
        found = await asubmit(make_batch(25), fresh, concurrency=5)
    assert report.exit_code is again.exit_code is found.exit_code is ExitCode.OK
    assert "25 found on the server by look-up" in found.summary()
    assert len(server.ledger()) == 25
    assert [r.ref for r in report.rows] == [f"E{i:04d}" for i in range(25)]


@pytest.mark.anyio
async def test_async_submit_stops_when_the_look_up_does_not_work(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    async with AsyncClient(
        store=tmp_path / "s.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as client:
        with pytest.raises(BatchInvalid, match="the look-up does not work"):
            await asubmit(make_batch(5), client, lookup="/v1/nowhere?reference={reference}")
        assert client.store.counts()[State.PENDING] == 0
    assert server.ledger() == ()


@pytest.mark.anyio
@pytest.mark.parametrize("misspelt", ["paht", "concurency", "notify", "metadata"])
async def test_async_submit_refuses_an_unknown_keyword_before_sending(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path, misspelt: str
) -> None:
    # As submit() does: a misspelt path= must not send to the default path.
    async with AsyncClient(
        store=tmp_path / "s.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as client:
        with pytest.raises(TypeError, match=misspelt):
            await asubmit(make_batch(3), client, **{misspelt: "/v1/elsewhere"})  # type: ignore[arg-type]
    assert server.ledger() == ()


def test_async_submit_shows_the_options_of_submit() -> None:
    options = dict(inspect.signature(submit).parameters)
    shown = dict(inspect.signature(asubmit).parameters)
    assert shown.keys() == options.keys()
    assert shown["concurrency"].default == options["concurrency"].default


#: Rows sent at once share the test's ManualClock: each row's retries sleep on it, so the
#: other rows' sleeps eat into a row's 60 s deadline. A row could then stop before its
#: eighth fault (leaving faults to a later run), or not be sent at all ("not_sent", not
#: "indeterminate") when two rows drew waits near the top (two rows' seven waits are up
#: to 63.5 s). One row at a time, each row has its whole deadline: 8 attempts and at
#: most 31.75 s of waits, whatever the jitter.
_ONE_ROW_AT_A_TIME = 1


def test_a_maybe_applied_row_past_the_key_retention_is_looked_up_not_sent_blindly(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    for i in range(3):  # applied, every answer lost
        server.drop(times=8, key=key_from_identity(f"E{i:04d}", "payout"))
    requests = Requests()
    with make_client(server, tmp_path / "s.db", clock, requests) as client:
        first = submit(make_batch(3), client, concurrency=_ONE_ROW_AT_A_TIME)
        assert {row.state for row in first.rows} == {"indeterminate"}
        clock.advance(2 * DAY)
        server.reap()  # the server forgot the keys
        blind = submit(make_batch(3), client, lookup=None)  # never re-sent, even so
        assert {row.state for row in blind.rows} == {"indeterminate"}
        assert all("ops reconcile batch/payout/E000" in row.reason for row in blind.rows)
        posts = requests.seen["POST"]
        settled = submit(make_batch(3), client)
        assert requests.seen["POST"] == posts  # looked up, found, recorded: nothing sent
    assert settled.exit_code is ExitCode.OK
    assert all(row.reason.startswith("found on the server by look-up") for row in settled.rows)
    assert len(server.ledger()) == 3


def test_a_row_never_applied_past_the_key_retention_is_looked_up_then_sent_with_its_key(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    for i in range(3):  # "maybe applied" (a 500), in fact never processed
        server.answer(500, times=8, key=key_from_identity(f"E{i:04d}", "payout"))
    with make_client(server, tmp_path / "s.db", clock) as client:
        first = submit(make_batch(3), client, concurrency=_ONE_ROW_AT_A_TIME)
        assert {row.state for row in first.rows} == {"indeterminate"}
        server.clear_faults()  # whatever the first run left, the re-run meets none of it
        clock.advance(2 * DAY)
        report = submit(make_batch(3), client)
        record = client.store.get("batch/payout/E0001")
    assert report.exit_code is ExitCode.OK
    assert [row.key for row in report.rows] == [row.key for row in first.rows]
    assert record is not None
    assert record.state is State.SUCCEEDED
    assert len(server.ledger()) == 3


def test_a_row_the_server_may_still_be_running_is_not_settled_by_an_early_look_up(
    clock: ManualClock, tmp_path: Path
) -> None:
    # Under django-idempotency-key a key is kept five minutes, so a maybe-applied row is
    # always looked up before a send. The server died after admitting the row's key
    # (admitted, not begun: nothing to find), and its recovery makes the payment later.
    # A look-up at once that finds nothing is not "never applied": settled and sent
    # again, the row was paid twice.
    name = "django-idempotency-key"
    key = key_from_identity("E0000", "payout")
    with (
        ReferenceServer(clock=clock, profile=name) as server,
        shop_client(server, clock, tmp_path / "s.db", profile=name, max_attempts=1) as client,
    ):
        server.crash("ADMITTED", key=key)
        first = submit(make_batch(1), client)
        assert [row.state for row in first.rows] == ["indeterminate"]
        # Past the key's five minutes (and the hosts' skew), within in_flight_for.
        window = profiles.BUILTIN[name].in_flight_for
        clock.advance(window - 200.0)
        again = submit(make_batch(1), client)
        [row] = again.rows
        assert row.state == "indeterminate"
        assert row.reason.startswith("not found on the server yet")
        assert server.ledger() == ()
        server.recover()  # the server finishes what it admitted
        clock.advance(200.0)
        settled = submit(make_batch(1), client)
        assert settled.exit_code is ExitCode.OK
        assert settled.rows[0].reason.startswith("found on the server by look-up")
        assert len(server.ledger()) == 1


class _Killed(BaseException):
    """The process killed: nothing after this point runs, nothing more is written."""


def test_a_batch_killed_while_its_look_up_held_a_row_does_not_count_as_a_send(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run past the key retention looks a maybe-applied row up and leases it to record
    # what it found; killed right then, its lease is taken over by the next run. Counted
    # as a send, that takeover made the row "sent just now": the next run's look-up
    # ("none") was not believed for in_flight_for more, and the row was left unsettled.
    from idemclient import _reconcile

    server.answer(500, times=8, key=key_from_identity("E0000", "payout"))  # never processed
    with make_client(server, tmp_path / "s.db", clock) as client:
        first = submit(make_batch(1), client)
        assert [row.state for row in first.rows] == ["indeterminate"]
        server.clear_faults()  # the row may have met its deadline before its eighth 500
        clock.advance(2 * DAY)
        before = client.store.get("batch/payout/E0000")
        assert before is not None

        def killed(*args: object, **kwargs: object) -> None:
            raise _Killed

        with monkeypatch.context() as patched:
            patched.setattr(_reconcile, "apply", killed)
            with pytest.raises(_Killed):
                submit(make_batch(1), client)
        held = client.store.get("batch/payout/E0000")
        assert held is not None
        assert held.lease_owner is not None
        assert (held.state, held.lease_look_up) == (State.INDETERMINATE, True)
        clock.advance(60.0)  # its lease has run out
        report = submit(make_batch(1), client)
        record = client.store.get("batch/payout/E0000")
    assert report.exit_code is ExitCode.OK, [row.reason for row in report.rows]
    assert record is not None
    assert record.state is State.SUCCEEDED
    assert record.key == before.key
    assert len(server.ledger()) == 1


def _django_client(server: ReferenceServer, clock: ManualClock, store: Path) -> Client:
    return shop_client(server, clock, store, profile="django-idempotency-key", max_attempts=1)


def test_a_row_sent_by_a_slow_host_is_not_settled_early_by_a_right_host(
    clock: ManualClock, tmp_path: Path
) -> None:
    # Two submitters of one store, 290 s apart (within CLOCK_SKEW: no step seen). The
    # slow one's send is stamped 290 s early; 800 s after it, within the server's
    # in_flight_for, the right host's look-up found nothing and believed it: the row
    # settled "never applied", was sent again, and the server's recovery paid it too.
    name = "django-idempotency-key"
    key = key_from_identity("E0000", "payout")
    window = profiles.BUILTIN[name].in_flight_for
    with ReferenceServer(clock=clock, profile=name) as server:
        server.crash("ADMITTED", key=key)
        slow = ManualClock(start=clock.time() - 290.0)
        with _django_client(server, slow, tmp_path / "s.db") as sender:
            assert [r.state for r in submit(make_batch(1), sender).rows] == ["indeterminate"]
        clock.advance(window - 100.0)
        with _django_client(server, clock, tmp_path / "s.db") as right:
            [row] = submit(make_batch(1), right).rows
            assert row.state == "indeterminate"
            assert row.reason.startswith("not found on the server yet")
            server.recover()  # the server finishes what it admitted
            settled = submit(make_batch(1), right)
            assert settled.rows[0].reason.startswith("found on the server by look-up")
        assert len(server.ledger()) == 1


def test_a_row_sent_by_a_fast_host_is_held_by_its_stamp_then_sent_once(
    clock: ManualClock, tmp_path: Path
) -> None:
    # The other direction: the sender was 290 s fast, its stamp late. The window ends
    # later than it must (a "none" believed late, never early), and then it does end.
    name = "django-idempotency-key"
    key = key_from_identity("E0000", "payout")
    window = profiles.BUILTIN[name].in_flight_for
    with ReferenceServer(clock=clock, profile=name) as server:
        server.answer(500, key=key)  # answered before anything ran
        fast = ManualClock(start=clock.time() + 290.0)
        with _django_client(server, fast, tmp_path / "s.db") as sender:
            assert [r.state for r in submit(make_batch(1), sender).rows] == ["indeterminate"]
        clock.advance(window + 10.0)  # the server surely ended it; the stamp says not
        with _django_client(server, clock, tmp_path / "s.db") as right:
            [row] = submit(make_batch(1), right).rows
            assert row.state == "indeterminate"
            assert row.reason.startswith("not found on the server yet")
            clock.advance(290.0 + CLOCK_SKEW)  # the stamp, in_flight_for and the skew
            settled = submit(make_batch(1), right)
            assert settled.exit_code is ExitCode.OK, [r.reason for r in settled.rows]
            assert [r.state for r in settled.rows] == ["succeeded"]
        assert len(server.ledger()) == 1
