"""Look-ups show their progress and are kept as they come (issue 28, item 12).

A run asks the server about each row before its first send. A payment found is
recorded at once; a "nothing found" is kept with when it was asked, so that a run
killed during its look-ups asks, when run again, only what it had not asked. A kept
"nothing found" is believed only for the same question (key, URL, reading,
credentials), for a row of which nothing can have been applied, and only while it is
young, by this clock and the server's; anything else is asked again.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from idemclient import Client, ManualClock, RetryPolicy, key_from_identity, profiles
from idemclient._server_time import ServerTime
from idemclient._store import NotFound
from idemclient._time import CLOCK_SKEW
from idemclient.batch import Batch, BatchInvalid, BatchProgress, ExitCode, submit
from idemclient.batch._remembered import BELIEVED_FOR, believed, reading
from idemclient.batch._sender import Sender
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, ServerRequest

from .support import command, exactly_once, payroll, references, run, wait_for

ROWS = 8
PAYOUTS = "/v1/payouts"


class Asked:
    """Each look-up a client made, by reference (an httpx event hook)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> None:
        if request.method == "GET" and request.url.path == PAYOUTS:
            with self.lock:
                self.seen[request.url.params["reference"]] += 1


def rows(n: int = ROWS, *, odd: int | None = None) -> Batch:
    """`n` rows; row `odd`, if given, with an amount of its own."""
    return Batch.from_records(
        [
            {
                "ref": f"E{i:04d}",
                "amount": 100 + i + (50 if i == odd else 0),
                "currency": "GBP",
                "value_date": "2026-11-30",
            }
            for i in range(n)
        ]
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as running:
        yield running


def client(
    server: ReferenceServer,
    store: Path,
    clock: ManualClock,
    asked: Asked,
    *,
    token: str = "payroll-ops",
    base_url: str = "http://psp.test",
    profile: profiles.Profile | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Client:
    return Client(
        store=store,
        clock=clock,
        transport=server.transport if transport is None else transport,
        base_url=base_url,
        headers={"Authorization": f"Bearer {token}"},
        event_hooks={"request": [asked]},
        profile=profile,
    )


def refused_after_its_look_ups(
    server: ReferenceServer,
    store: Path,
    clock: ManualClock,
    own: ManualClock | None = None,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """A run whose look-ups all come back, refused for one row (E0003, found on the
    server with other content): nothing is sent, and the other rows' "nothing found"
    is kept. `own`: the clock of the run's host, if not the server's; `transport`: the
    way to the server, if not its own."""
    with Client(
        store=store.parent / "elsewhere.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as elsewhere:
        elsewhere.post(
            PAYOUTS,
            json={"reference": "E0003", "amount": 999, "currency": "GBP"},
            key="by-hand",
        )
    asked = Asked()
    with (
        client(server, store, own or clock, asked, transport=transport) as first,
        pytest.raises(BatchInvalid),
    ):
        submit(rows(), first, concurrency=3)
    assert set(asked.seen) == {f"E{i:04d}" for i in range(ROWS)}
    assert len(server.ledger()) == 1
    with SQLiteStore(store) as kept:
        assert len(kept.not_found([f"batch/payout/E{i:04d}" for i in range(ROWS)])) == ROWS - 1


def without_e0003() -> Batch:
    return Batch.from_records(
        [
            {"ref": f"E{i:04d}", "amount": 100 + i, "currency": "GBP", "value_date": "2026-11-30"}
            for i in range(ROWS)
            if i != 3
        ]
    )


def test_a_rerun_asks_only_what_it_had_not_asked(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    clock.advance(60)
    asked = Asked()
    with client(server, store, clock, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    # Every answer was kept; one row is asked again, for the server's time (its Date),
    # by which the others are judged too; they are believed.
    assert sum(asked.seen.values()) == 1
    assert report.metadata["looked_up"] == ROWS - 1
    assert sorted(e.reference for e in server.ledger()) == sorted(f"E{i:04d}" for i in range(ROWS))


@pytest.mark.parametrize(
    "change",
    [
        # too old: the row may have been paid since by another machine
        lambda c: {"later": BELIEVED_FOR},
        # asked with other credentials: another account may hold other payments
        lambda c: {"token": "payroll-ops-2"},
        # asked at another server
        lambda c: {"base_url": "http://psp-2.test"},
        # a key retention under four times the window: a quarter of it
        lambda c: {"profile": profiles.DEFAULT.with_retention(20 * 60), "later": 5 * 60 + 1},
    ],
    ids=["too-old", "other-token", "other-origin", "short-key-retention"],
)
def test_a_kept_nothing_found_is_asked_again_unless_it_answers_the_same_question_young(
    server: ReferenceServer,
    clock: ManualClock,
    tmp_path: Path,
    change: Callable[[ManualClock], dict[str, object]],
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    options = change(clock)
    clock.advance(float(options.pop("later", 0.0)))  # type: ignore[arg-type]
    asked = Asked()
    with client(server, store, clock, asked, **options) as again:  # type: ignore[arg-type]
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert sorted(asked.seen) == [f"E{i:04d}" for i in range(ROWS) if i != 3]


def test_a_payment_made_elsewhere_since_is_found_once_the_answer_is_too_old(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    # Paid meanwhile from elsewhere, by a person, under a key of its own.
    with Client(
        store=tmp_path / "by-hand.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as by_hand:
        paid = {"reference": "E0005", "amount": 105, "currency": "GBP", "value_date": "2026-11-30"}
        by_hand.post(PAYOUTS, json=paid, key="by-hand-5")
    clock.advance(BELIEVED_FOR)
    asked = Asked()
    with client(server, store, clock, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert "E0005" in asked.seen
    by_reference = Counter(e.reference for e in server.ledger())
    assert by_reference["E0005"] == 1  # found, recorded, not paid again
    assert "1 found on the server by look-up" in report.summary()


def test_a_payment_made_by_another_store_under_the_rows_key_is_not_paid_twice(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    # Another machine ran the same file meanwhile (its own store): same keys.
    with client(server, tmp_path / "other-machine.db", clock, Asked()) as other:
        assert submit(without_e0003(), other, concurrency=3).exit_code is ExitCode.OK
    clock.advance(60)
    asked = Asked()
    with client(server, store, clock, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert sum(asked.seen.values()) == 1  # the others believed: sent under their keys
    by_reference = Counter(e.reference for e in server.ledger())
    assert set(by_reference.values()) == {1}


def test_a_clock_set_back_a_little_asks_again(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    behind = ManualClock(start=clock.time() - 120)  # set back two minutes since
    asked = Asked()
    with client(server, store, behind, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert sorted(asked.seen) == [f"E{i:04d}" for i in range(ROWS) if i != 3]


def test_answers_kept_by_a_clock_running_fast_are_judged_by_the_servers_time(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    fast = ManualClock(start=clock.time() + 3 * 3600)  # three hours ahead
    refused_after_its_look_ups(server, store, clock, own=fast)
    clock.advance(3 * 3600 + 300)  # set right, three hours and five minutes later
    right = ManualClock(start=clock.time())  # by it, the answers are five minutes old
    asked = Asked()
    with client(server, store, right, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert sorted(asked.seen) == [f"E{i:04d}" for i in range(ROWS) if i != 3]


class WithoutDate(httpx.BaseTransport):
    """A gateway that drops the server's `Date` from its answers."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        del response.headers["date"]
        return response


def test_an_answer_kept_without_the_servers_time_is_judged_by_the_servers_clock_from_its_stamp(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    # The first run's answers came through a gateway that dropped their Date: each is
    # kept with this host's stamp alone. Twenty minutes on, a person pays E0005 by
    # hand; this host's clock was set back fifteen minutes meanwhile, while nothing
    # ran (the store saw no step: it is still after every stamp the store holds). By
    # this host's clock the answers are five minutes old; by the server's clock,
    # measured from their stamp, twenty: too old to believe (BELIEVED_FOR, counting
    # the skew), so E0005 is asked again and found, not paid a second time.
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock, transport=WithoutDate(server.transport))
    clock.advance(20 * 60)
    with Client(
        store=tmp_path / "by-hand.db",
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
    ) as by_hand:
        paid = {"reference": "E0005", "amount": 105, "currency": "GBP", "value_date": "2026-11-30"}
        by_hand.post(PAYOUTS, json=paid, key="by-hand-5")
    behind = ManualClock(start=clock.time() - 15 * 60)
    assert 5 * 60 + CLOCK_SKEW < BELIEVED_FOR <= 20 * 60 + CLOCK_SKEW
    asked = Asked()
    with client(server, store, behind, asked) as again:
        report = submit(without_e0003(), again, concurrency=3)
    assert report.exit_code is ExitCode.OK, report.summary()
    assert "E0005" in asked.seen
    assert Counter(e.reference for e in server.ledger())["E0005"] == 1
    assert "1 found on the server by look-up" in report.summary()


def test_a_clock_set_back_far_makes_the_store_forget_every_answer(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    behind = ManualClock(start=clock.time() - 3600)
    with client(server, store, behind, Asked()):
        pass  # its start sees the step back
    with SQLiteStore(store) as kept:
        assert kept.not_found([f"batch/payout/E{i:04d}" for i in range(ROWS)]) == []


def test_a_row_that_may_have_been_applied_is_asked_whatever_was_kept(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    store = tmp_path / "s.db"
    refused_after_its_look_ups(server, store, clock)
    # Sent, their answers lost: they may have been applied (they were).
    server.drop(key=key_from_identity("E0002", "payout"))
    server.drop(key=key_from_identity("E0005", "payout"))
    with Client(
        store=store,
        clock=clock,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll-ops"},
        policy=RetryPolicy(max_attempts=1),
    ) as lossy:
        report = submit(without_e0003(), lossy, concurrency=1)
    assert report.exit_code is ExitCode.RUN_AGAIN
    unsettled = [row.ref for row in report.rows if row.state == "indeterminate"]
    assert unsettled == ["E0002", "E0005"]
    asked = Asked()
    with client(server, store, clock, asked) as again:
        settled = submit(without_e0003(), again, concurrency=3)
    assert settled.exit_code is ExitCode.OK, settled.summary()
    assert sorted(asked.seen) == unsettled  # asked again, and found
    paid = Counter(e.reference for e in server.ledger())
    assert [paid[ref] for ref in unsettled] == [1, 1]


def test_look_ups_tell_their_progress_then_the_sends_theirs(
    server: ReferenceServer, clock: ManualClock, tmp_path: Path
) -> None:
    seen: list[BatchProgress] = []
    with client(server, tmp_path / "s.db", clock, Asked()) as fresh:
        report = submit(rows(), fresh, concurrency=2, on_progress=seen.append)
    assert report.exit_code is ExitCode.OK
    phases = [p.phase for p in seen]
    first_send = phases.index("sending")
    assert set(phases[:first_send]) == {"looking up"}
    assert set(phases[first_send:]) == {"sending"}
    looking = seen[:first_send]
    assert {p.total for p in looking} == {ROWS}
    assert [p.done for p in looking] == sorted(p.done for p in looking)
    assert (looking[-1].done, looking[-1].not_found, looking[-1].found) == (ROWS, ROWS, 0)


# -- when a kept "nothing found" is believed: every rule, alone ----------------------------

NOW = 1_800_000_000.0
URL = "https://psp.test/v1/payouts?reference=E1"
SENDER = Sender(b"token-1")


def kept_answer(**changes: object) -> NotFound:
    values: dict[str, object] = {
        "operation_id": "batch/payout/E1",
        "key": "k1",
        "url": SENDER.mark(URL),
        "reading": reading("reference", False),
        "asked_at": NOW - 60,
        "server_at": NOW - 60,
    }
    values.update(changes)
    return NotFound(**values)  # type: ignore[arg-type]


def server_now(offset: float = 0.0) -> ServerTime:
    return ServerTime(NOW + offset, NOW + offset + 1)


@pytest.mark.parametrize(
    ("kept", "asked_with", "believed_now"),
    [
        (kept_answer(), {}, True),
        # the same question, young, and the server's clock agrees
        (kept_answer(server_at=None), {}, True),  # the server sent no Date then
        (kept_answer(), {"server": None}, True),  # its time is not known now
        # another question
        (kept_answer(key="k2"), {}, False),
        (kept_answer(url=SENDER.mark(URL.replace("E1", "E2"))), {}, False),
        (kept_answer(url=SENDER.mark(URL.replace("psp.test", "psp-2.test"))), {}, False),
        (kept_answer(reading=reading("external_reference", False)), {}, False),
        (kept_answer(reading=reading("reference", True)), {}, False),
        (kept_answer(url=Sender(b"token-2").mark(URL)), {}, False),  # other credentials
        (kept_answer(url=URL), {}, False),  # asked with none, sent with some
        (kept_answer(), {"sender": Sender(None)}, False),  # asked with some, now none
        # too old by this clock, counting the clock skew between hosts
        (kept_answer(asked_at=NOW - (BELIEVED_FOR - CLOCK_SKEW)), {}, False),
        (kept_answer(asked_at=NOW - (BELIEVED_FOR - CLOCK_SKEW) + 1), {"server": None}, True),
        # and by the server's clock from this host's stamp (its Date read as the latest
        # it allows: a second sooner)
        (kept_answer(asked_at=NOW - (BELIEVED_FOR - CLOCK_SKEW) + 1), {}, False),
        (kept_answer(asked_at=NOW - (BELIEVED_FOR - CLOCK_SKEW) + 2), {}, True),
        (kept_answer(asked_at=NOW - 60, server_at=None), {"server": server_now(600)}, False),
        # asked in this clock's future: its age is not known
        (kept_answer(asked_at=NOW + 1), {}, False),
        # too old by the server's clock
        (kept_answer(server_at=NOW - BELIEVED_FOR), {}, False),
        # the server's clock went back between the two readings
        (kept_answer(server_at=NOW + 60), {}, False),
        # a key retention under four times the window: a quarter of it
        (kept_answer(asked_at=NOW - 200), {"retention": 800.0}, False),
        (kept_answer(asked_at=NOW - 60), {"retention": 4 * CLOCK_SKEW + 400.0}, True),
    ],
)
def test_a_kept_nothing_found_is_believed_only_for_the_same_question_while_young(
    kept: NotFound, asked_with: dict[str, object], believed_now: bool
) -> None:
    options: dict[str, object] = {
        "key": "k1",
        "url": URL,
        "how": reading("reference", False),
        "sender": SENDER,
        "now": NOW,
        "retention": 86_400.0,
        "server": server_now(),
        **asked_with,
    }
    assert believed(kept, **options) is believed_now  # type: ignore[arg-type]


# -- killed during its look-ups, a real process --------------------------------------------


def test_a_run_killed_during_its_look_ups_asks_only_what_it_had_not_asked(
    live: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows_in_file = 40
    (tmp_path / "payroll.csv").write_text(payroll(rows_in_file))
    asked: Counter[str] = Counter()
    lock = threading.Lock()
    handle = live.server.handle

    def counting(request: ServerRequest) -> object:
        if request.method == "GET" and request.path == PAYOUTS:
            (reference,) = parse_qs(request.query)["reference"]
            with lock:
                asked[reference] += 1
        return handle(request)

    monkeypatch.setattr(live.server, "handle", counting)
    # Each look-up answered a little late, so that the kill lands among them.
    live.server.delay(0.05, times=rows_in_file, path=PAYOUTS)
    argv = command(
        live.url, tmp_path / "payroll.csv", tmp_path / "batches.db", "--concurrency", "2"
    )
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as first:
        assert wait_for(first, lambda: sum(asked.values()) >= 16)
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert live.server.ledger() == ()
    before = Counter(asked)
    live.server.clear_faults()
    again = run(argv)
    assert again.returncode == 0, again.stderr
    assert "answered by an earlier run's look-up, kept" in again.stderr
    asked_again = [ref for ref in before if asked[ref] > 1]
    # At most the look-ups in flight when it was killed (two at a time) are asked twice.
    assert len(asked_again) <= 2, asked_again
    assert sum(asked.values()) - sum(before.values()) <= rows_in_file - len(before) + 2
    exactly_once(live, references(rows_in_file))
    assert urlsplit(live.url).hostname == "127.0.0.1"
