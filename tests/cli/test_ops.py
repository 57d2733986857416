"""`idemclient ops`: seeing and finishing what a store holds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from click.testing import CliRunner

import idemclient._ops_cli
from idemclient import (
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    ReconcileRequired,
    RetryPolicy,
    State,
    key_from_identity,
)
from idemclient.cli import main
from idemclient.clock import SystemClock, set_testing
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, serve

from .test_progress import run_in_terminal

PAYMENT = {"amount": 500, "currency": "EUR", "reference": "inv-9"}


@pytest.fixture(autouse=True)
def no_real_sleeps() -> Iterator[None]:
    """The commands build their own clients on the system clock: make it not sleep."""
    set_testing(True)
    yield
    set_testing(False)


@pytest.fixture
def live() -> Iterator[LiveServer]:
    # On the real clock, as the command's clients are: the server sends its time (Date)
    # and they read it, so a server clock weeks ahead (a ManualClock's start) would make
    # every maybe-applied operation look weeks old, never sent again.
    with ReferenceServer(clock=SystemClock()) as server, serve(server) as running:
        yield running


@pytest.fixture
def store_with_history(tmp_path: Path, live: LiveServer) -> Path:
    """A store holding one succeeded and one indeterminate operation."""
    path = tmp_path / "ops.db"
    with Client(
        store=path,
        clock=ManualClock(start=time.time()),  # records dated now, for purge --older-than
        base_url=live.url,
        headers={"Authorization": "Bearer shop-1"},
    ) as client:
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
        live.server.drop(path="/v1/payments", times=8)
        with pytest.raises(Indeterminate):
            client.post(
                "/v1/payments", json={**PAYMENT, "reference": "inv-10"}, operation_id="order-2"
            )
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_list_shows_every_operation_and_counts(store_with_history: Path) -> None:
    code, out, err = run("ops", "list", "--store", str(store_with_history))
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["order-1", "order-2"]
    assert "succeeded" in lines[0]
    assert "indeterminate" in lines[1]
    assert "ref=inv-10" not in out  # the reference is the call's, not the body's
    assert "succeeded 1" in err
    assert "indeterminate 1" in err


def test_list_filters_by_state_and_unfinished(store_with_history: Path) -> None:
    _, out, _ = run("ops", "list", "--store", str(store_with_history), "--unfinished")
    assert [line.split()[0] for line in out.splitlines()] == ["order-2"]
    _, out, _ = run("ops", "list", "--store", str(store_with_history), "--state", "succeeded")
    assert [line.split()[0] for line in out.splitlines()] == ["order-1"]


def test_show_tells_everything_but_secrets(store_with_history: Path) -> None:
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2")
    assert code == 0
    assert "state: indeterminate" in out
    assert "maybe applied: True" in out
    assert "RemoteProtocolError" in out
    assert "shop-1" not in out  # the bearer token was never stored
    # When its attempt that may have been applied was sent: a look-up's "none" waits.
    with SQLiteStore(store_with_history) as store:
        record = store.get("order-2")
    assert record is not None
    assert record.sent_at is not None
    assert "last sent: 20" in out
    _, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2", "--json")
    assert json.loads(out)["sent_at"] == record.sent_at


def test_show_says_when_a_clock_went_back_over_an_operation(store_with_history: Path) -> None:
    with SQLiteStore(store_with_history) as store:
        assert store.clock_went_back(step=7200.0, now=time.time()) == 1  # order-2
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2")
    assert code == 0
    assert "age unknown: a clock went back 7200s" in out
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2", "--json")
    assert json.loads(out)["clock_stepped"] == 7200.0
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-1")
    assert "age unknown" not in out


def test_show_says_when_a_replay_came_that_nothing_of_ours_explains(tmp_path: Path) -> None:
    # django-idempotency-key's replay is a 409, as is the application's own conflict.
    path = tmp_path / "ops.db"
    conflict = httpx.Response(409, json={"detail": "an order with this number exists"})
    with (
        Client(
            store=path,
            clock=ManualClock(),
            transport=httpx.MockTransport(lambda request: conflict),
            base_url="https://shop.test",
            profile="django-idempotency-key",
        ) as client,
        pytest.raises(ReconcileRequired),
    ):
        client.post("/orders", json={"number": 7}, operation_id="order-7", key="order-7")
    code, out, _ = run("ops", "show", "--store", str(path), "order-7")
    assert code == 0
    assert "replay unexplained: an answer its profile reads as a replay" in out
    _, out, _ = run("ops", "show", "--store", str(path), "order-7", "--json")
    assert json.loads(out)["replay_unexplained"] is True


def test_show_by_key_and_unknown(store_with_history: Path) -> None:
    with SQLiteStore(store_with_history) as store:
        record = store.get("order-1")
    assert record is not None
    code, out, _ = run("ops", "show", "--store", str(store_with_history), record.key)
    assert code == 0
    assert "operation: order-1" in out
    code, _, err = run("ops", "show", "--store", str(store_with_history), "nope")
    assert code == 2
    assert "no operation 'nope'" in err


def test_resume_finishes_unfinished_operations(store_with_history: Path, live: LiveServer) -> None:
    code, out, err = run("ops", "resume", "--store", str(store_with_history), "--token", "shop-1")
    assert code == 0, err
    assert "order-2  succeeded" in out
    assert "resumed 1 operation(s)" in err
    assert len(live.server.ledger()) == 2
    with SQLiteStore(store_with_history) as store:
        assert store.counts()[State.SUCCEEDED] == 2


def test_resume_of_a_store_of_two_origins_sends_one_token_to_one_origin_only(
    store_with_history: Path, live: LiveServer
) -> None:
    # A second provider's unfinished payment in the same store: one --token is one
    # origin's credential, never sent to the other's host.
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        Client(
            store=store_with_history,
            base_url="https://wallets.psp.test",
            transport=httpx.MockTransport(down),
            policy=RetryPolicy(max_attempts=1),
        ) as wallets,
        pytest.raises(NotSent),
    ):
        wallets.post("/v1/payments", json=PAYMENT, operation_id="wallet-1")
    paid = len(live.server.ledger())
    code, _, err = run("ops", "resume", "--store", str(store_with_history), "--token", "shop-1")
    assert code == 2
    assert "2 origins" in err
    assert "https://wallets.psp.test" in err
    assert "--url" in err
    assert len(live.server.ledger()) == paid  # nothing sent
    code, out, err = run(
        "ops", "resume", "--store", str(store_with_history), "--token", "shop-1",
        "--url", live.url,
    )  # fmt: skip
    assert code == 3, err  # the other origin's is left as it was
    assert "order-2  succeeded" in out
    assert "wallet-1" in out
    assert "bound to https://wallets.psp.test" in out
    assert len(live.server.ledger()) == 2  # as a resume of this store leaves it
    with SQLiteStore(store_with_history) as store:
        left = store.get("wallet-1")
    assert left is not None
    assert left.state is State.NOT_SENT


def test_resume_of_one_profile_with_a_limit_resumes_that_profile_s_operations(
    tmp_path: Path, live: LiveServer
) -> None:
    # The oldest unfinished operation was sent under stripe; `--profile generic --limit
    # 1` took the oldest one of any profile, left it (not generic), resumed nothing and
    # exited 0, "every one settled", with a generic operation still unsettled.
    path = tmp_path / "ops.db"
    for profile, operation_id in (("stripe", "s-op"), ("generic", "g-op")):
        with Client(
            store=path,
            base_url=live.url,
            headers={"Authorization": "Bearer shop-1"},
            profile=profile,
        ) as client:
            live.server.drop(path="/v1/payments", times=8)
            with pytest.raises(Indeterminate):
                client.post(
                    "/v1/payments",
                    json={**PAYMENT, "reference": operation_id},
                    operation_id=operation_id,
                )
    store = str(path)
    code, out, err = run(
        "ops", "resume", "--store", store, "--token", "shop-1", "--profile", "generic",
        "--limit", "1",
    )  # fmt: skip
    assert code == 0, err
    assert [line.split()[:2] for line in out.splitlines()] == [["g-op", "succeeded"]]
    with SQLiteStore(path) as opened:
        untouched = opened.get("s-op")
    assert untouched is not None
    assert untouched.state is State.INDETERMINATE  # not sent: another profile's
    code, out, err = run("ops", "resume", "--store", store, "--token", "shop-1", "--limit", "1")
    assert code == 0, err
    assert [line.split()[:2] for line in out.splitlines()] == [["s-op", "succeeded"]]
    assert len(live.server.ledger()) == 2  # each paid once


def test_resume_with_the_server_still_failing_exits_3(
    store_with_history: Path, live: LiveServer
) -> None:
    live.server.drop(path="/v1/payments", times=100)
    code, out, _ = run("ops", "resume", "--store", str(store_with_history), "--token", "shop-1")
    assert code == 3
    assert "order-2  indeterminate" in out


def test_purge_deletes_finished_only(store_with_history: Path) -> None:
    code, _, err = run("ops", "purge", "--store", str(store_with_history), "order-1", "order-2")
    assert code == 2
    assert "indeterminate, not finished" in err
    code, out, _ = run("ops", "purge", "--store", str(store_with_history), "order-1")
    assert code == 0
    assert "purged 1" in out
    code, out, _ = run("ops", "list", "--store", str(store_with_history))
    assert [line.split()[0] for line in out.splitlines()] == ["order-2"]


def test_purge_of_a_mistyped_id_names_it_and_purges_nothing(store_with_history: Path) -> None:
    # Twice in a row, or with a typo among good ids: the message names the id and the
    # store whole (its quotes balanced), says nothing was purged, and purges nothing.
    store = str(store_with_history)
    code, out, err = run("ops", "purge", "--yes", "--store", store, "order-1", "order-9")
    assert code == 2
    assert out == ""
    assert f"no operation 'order-9' in '{store}'; nothing was purged" in err, err
    code, out, _ = run("ops", "list", "--store", store)
    assert [line.split()[0] for line in out.splitlines()] == ["order-1", "order-2"]


def test_purge_by_age(store_with_history: Path) -> None:
    code, out, _ = run("ops", "purge", "--store", str(store_with_history), "--older-than", "0")
    assert code == 0
    assert "purged 1" in out  # the finished one; the unfinished one stays
    code, _, err = run("ops", "purge", "--store", str(store_with_history))
    assert code == 2
    assert "not both and not neither" in err


def test_a_missing_or_foreign_store_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = run("ops", "list", "--store", str(tmp_path / "none.db"))
    assert code == 2
    assert "no store at" in err
    foreign = tmp_path / "notes.db"
    foreign.write_text("my notes\n" * 20)
    code, _, err = run("ops", "list", "--store", str(foreign))
    assert code == 2
    assert "not a SQLite database" in err
    assert foreign.read_text() == "my notes\n" * 20


@pytest.mark.parametrize(
    "given",
    [
        "host=db.internal port=5432 dbname=payroll user=ops",
        "dbname=payroll",
        "postgresql://ops@127.0.0.1:9/payroll",  # the URL form: tried as PostgreSQL
    ],
)
def test_a_postgresql_keyword_string_is_refused_not_made_a_sqlite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    # libpq's other form of a connection string, as DATABASE_URL often holds it: taken
    # as a SQLite file's name, it made a new empty store beside the real one, and the
    # batch ran on it without the rows the shared store knows.
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "payroll.csv"
    file.write_text(
        "ref,employee_id,name,account,amount,currency,value_date\n"
        "R-1,E1,Ada,GB1,100,GBP,2026-11-30\n"
    )
    env = {"IDEMCLIENT_TOKEN": "t", "IDEMCLIENT_URL": "http://127.0.0.1:9"}
    for args in (["ops", "list"], ["batch", "submit", str(file)]):
        result = CliRunner().invoke(main, [*args, "--store", given], env=env)
        assert result.exit_code == 2, result.output
        if given.startswith("postgresql://"):
            assert "127.0.0.1:9/payroll" in result.stderr  # tried, and named
        else:
            assert "postgresql://" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payroll.csv"]  # no file made


def test_reconcile_settles_by_lookup(store_with_history: Path, live: LiveServer) -> None:
    code, out, err = run(
        "ops", "reconcile", "order-2", "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1",
        "--lookup", "/v1/payments?idempotency_key={key}",
    )  # fmt: skip
    assert code == 0, err
    assert "order-2  succeeded" in out
    assert "settled by look-up" in out
    assert len(live.server.ledger()) == 2  # nothing was sent again


@pytest.mark.parametrize(
    ("operation_id", "said", "unsaid"),
    [
        # The generic profile knows no look-up, and order-2 is no batch row.
        ("order-2", "--lookup", "lookup="),
        # A mistyped id: said so, not sent after a --lookup that would not have helped.
        ("order-3", "no operation 'order-3'", "lookup"),
    ],
)
def test_reconcile_refused_says_why_in_the_command_s_words_and_sends_nothing(
    store_with_history: Path, live: LiveServer, operation_id: str, said: str, unsaid: str
) -> None:
    before = live.server.ledger()
    code, _, err = run(
        "ops", "reconcile", operation_id, "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1",
    )  # fmt: skip
    assert code == 2
    assert said in err, err
    assert unsaid not in err
    assert live.server.ledger() == before  # nothing was sent
    with SQLiteStore(store_with_history) as store:
        assert [r.operation_id for r in store.operations()] == ["order-1", "order-2"]


def test_reconcile_takes_the_key_as_show_does(store_with_history: Path, live: LiveServer) -> None:
    # `ops show` finds an operation by its key as well: an operator who pastes the key
    # it shows into `ops reconcile` settles that operation, with its own look-up.
    with SQLiteStore(store_with_history) as store:
        record = store.get("order-2")
    assert record is not None
    code, out, err = run(
        "ops", "reconcile", record.key, "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1",
        "--lookup", "/v1/payments?idempotency_key={key}",
    )  # fmt: skip
    assert code == 0, err
    assert "order-2  succeeded" in out
    assert len(live.server.ledger()) == 2  # nothing was sent again


def test_reconcile_that_cannot_tell_exits_3(store_with_history: Path, live: LiveServer) -> None:
    live.server.answer(500, path="/v1/payments")
    code, _, err = run(
        "ops", "reconcile", "order-2", "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1",
        "--lookup", "/v1/payments?idempotency_key={key}",
    )  # fmt: skip
    assert code == 3
    assert "HTTP 500" in err
    code, _, err = run(
        "ops", "reconcile", "order-2", "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1", "--lookup", "/v1/payments?id={id}",
    )  # fmt: skip
    assert code == 2
    assert "only use" in err


def test_reconcile_reads_the_status_and_takes_a_mapping(tmp_path: Path, live: LiveServer) -> None:
    path = tmp_path / "ops.db"
    live.server.crash("H2_DONE", path="/v1/payments")  # left "authorized" on the server
    live.server.answer(503, path="/v1/payments", times=7)  # the other 7 of 8 attempts
    with (
        Client(
            store=path,
            clock=ManualClock(start=time.time()),
            base_url=live.url,
            headers={"Authorization": "Bearer shop-1"},
        ) as client,
        pytest.raises(Indeterminate),
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="order-3", reference="inv-9")
    common = (
        "ops", "reconcile", "order-3", "--store", str(path), "--url", live.url,
        "--token", "shop-1", "--lookup", "/v1/payments?reference={reference}",
    )  # fmt: skip
    code, _, err = run(*common)
    assert code == 3
    assert "status 'authorized', which is not final" in err
    code, out, err = run(*common, "--status", "authorized=succeeded")
    assert code == 0, err
    assert "order-3  succeeded" in out
    code, _, err = run(*common, "--status", "authorized")
    assert code == 2
    assert "NAME=succeeded or NAME=failed" in err


def test_reconcile_treats_a_404_as_not_found_only_when_told(
    store_with_history: Path, live: LiveServer
) -> None:
    common = (
        "ops", "reconcile", "order-2", "--store", str(store_with_history), "--url", live.url,
        "--token", "shop-1", "--lookup", "/v1/payments/{key}",
    )  # fmt: skip
    code, _, err = run(*common)  # a 404: the look-up may be wrong, so nothing is settled
    assert code == 3
    assert "HTTP 404" in err
    with SQLiteStore(store_with_history) as store:
        record = store.get("order-2")
        assert record is not None
        assert record.state is State.INDETERMINATE


def _sent_ago(path: Path, live: LiveServer, seconds: float) -> None:
    """`order-5` in `path`, maybe applied (an HTTP 500 the server answered before it ran
    anything), its last attempt sent `seconds` ago.

    One attempt: retries would sleep on the clock, and the last send would be the jitter
    drawn later than `seconds` ago, by from nothing to half a minute."""
    live.server.answer(500, path="/v1/payments", times=1)
    with (
        Client(
            store=path,
            clock=ManualClock(start=time.time() - seconds),
            # Dated back by a slow clock: no server time kept beside its stamps (as an
            # earlier version recorded), which would say it was sent just now.
            server_clock=False,
            policy=RetryPolicy(max_attempts=1),
            base_url=live.url,
            headers={"Authorization": "Bearer shop-1"},
        ) as client,
        pytest.raises(Indeterminate),
    ):
        client.post(
            "/v1/payments",
            json={**PAYMENT, "reference": "inv-5"},
            operation_id="order-5",
            reference="inv-5",
        )


def _reconcile_5(path: Path, live: LiveServer, *more: str) -> tuple[int, str, str]:
    return run(
        "ops", "reconcile", "order-5", "--store", str(path), "--url", live.url,
        "--token", "shop-1", "--lookup", "/v1/payments?reference={reference}", *more,
    )  # fmt: skip


def test_reconcile_takes_in_flight_for_over_the_profile_s(tmp_path: Path, live: LiveServer) -> None:
    # Sent 17 minutes ago, nothing found: under the profile's window (15 minutes, and 5
    # for the hosts' clocks) the server may still be running it.
    path = tmp_path / "ops.db"
    _sent_ago(path, live, 1020.0)
    code, _, err = _reconcile_5(path, live)
    assert code == 3
    assert "may still be running it" in err
    # The operator knows its server ends a request within ten minutes.
    code, out, err = _reconcile_5(path, live, "--in-flight-for", "10m")
    assert code == 0, err
    assert "order-5  not_sent" in out
    assert live.server.ledger() == ()  # looked up, never sent again


def test_reconcile_in_flight_for_still_allows_for_the_hosts_clock_skew(
    tmp_path: Path, live: LiveServer
) -> None:
    # Nine minutes is past the operator's five, not past five and the five minutes two
    # hosts' clocks may be apart: the send may be later than its stamp says. (Not ten:
    # that is the very end of the window, passed by the time the command reads its clock.)
    path = tmp_path / "ops.db"
    _sent_ago(path, live, 540.0)
    code, _, err = _reconcile_5(path, live, "--in-flight-for", "5m")
    assert code == 3
    assert "may still be running it" in err
    with SQLiteStore(path) as store:
        record = store.get("order-5")
    assert record is not None
    assert (record.state, record.maybe_applied) == (State.INDETERMINATE, True)


@pytest.mark.parametrize("given", ["soon", "0", "-5m", "5 minutes", ""])
def test_reconcile_refuses_an_in_flight_for_that_is_no_duration(
    store_with_history: Path, live: LiveServer, given: str
) -> None:
    code, _, err = run(
        "ops", "reconcile", "order-2", "--store", str(store_with_history),
        "--url", live.url, "--token", "shop-1", "--in-flight-for", given,
    )  # fmt: skip
    assert code == 2
    assert "--in-flight-for" in err
    assert f"{given!r}: give a positive duration" in err
    with SQLiteStore(store_with_history) as store:
        record = store.get("order-2")
    assert record is not None
    assert record.state is State.INDETERMINATE  # refused before anything was looked up


# -- for operators: JSON, retries shown, a purge that asks, colour on terminals only -----


def test_list_as_json(store_with_history: Path) -> None:
    code, out, _ = run("ops", "list", "--store", str(store_with_history), "--json")
    assert code == 0
    document = json.loads(out)
    assert [op["operation_id"] for op in document["operations"]] == ["order-1", "order-2"]
    assert [op["state"] for op in document["operations"]] == ["succeeded", "indeterminate"]
    assert document["operations"][0]["status"] == 201
    assert document["operations"][1]["maybe_applied"] is True
    assert document["counts"]["succeeded"] == 1
    assert document["counts"]["indeterminate"] == 1


def test_a_list_cut_at_its_limit_says_so(store_with_history: Path) -> None:
    # `ops list --unfinished --json | jq ...` to settle each: past --limit (100 by
    # default) the rest were left out without a word, and the counts below are per
    # state of the whole store, not of the list.
    store = str(store_with_history)
    code, out, _ = run("ops", "list", "--store", store, "--json", "--limit", "1")
    assert code == 0
    document = json.loads(out)
    assert [op["operation_id"] for op in document["operations"]] == ["order-1"]
    assert document["truncated"] is True
    code, out, _ = run("ops", "list", "--store", store, "--json", "--limit", "2")
    assert json.loads(out)["truncated"] is False
    code, out, err = run("ops", "list", "--store", store, "--limit", "1")
    assert [line.split()[0] for line in out.splitlines()] == ["order-1"]
    assert "more not listed" in err
    assert "--limit" in err
    code, out, err = run("ops", "list", "--store", store)
    assert "more not listed" not in err


def test_list_unfinished_in_a_state_lists_only_that_state(store_with_history: Path) -> None:
    # --unfinished with --state pending: order-2 is indeterminate, so none is listed.
    store = str(store_with_history)
    _, out, _ = run("ops", "list", "--store", store, "--unfinished", "--state", "pending")
    assert out == ""
    _, out, _ = run("ops", "list", "--store", store, "--unfinished", "--state", "indeterminate")
    assert [line.split()[0] for line in out.splitlines()] == ["order-2"]
    _, out, _ = run("ops", "list", "--store", store, "--unfinished", "--state", "succeeded")
    assert out == ""


def test_show_as_json(store_with_history: Path) -> None:
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-1", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["operation_id"] == "order-1"
    assert document["state"] == "succeeded"
    assert json.loads(document["body"]) == PAYMENT
    assert document["response"]["status"] == 201
    assert json.loads(document["response"]["body"])["status"] == "succeeded"
    assert "shop-1" not in out


def test_resume_verbose_shows_each_retry(store_with_history: Path, live: LiveServer) -> None:
    live.server.answer(503, path="/v1/payments", retry_after_ms=10)
    code, _, err = run(
        "ops", "resume", "--store", str(store_with_history), "--token", "shop-1", "-v"
    )
    assert code == 0, err
    assert re.search(r"^retry: order-2 after attempt \d+: HTTP 503 .*; next attempt in", err, re.M)


def test_resume_without_verbose_shows_no_retry(store_with_history: Path, live: LiveServer) -> None:
    live.server.answer(503, path="/v1/payments", retry_after_ms=10)
    code, _, err = run("ops", "resume", "--store", str(store_with_history), "--token", "shop-1")
    assert code == 0, err
    assert "retry:" not in err


def _stored(store: Path) -> list[str]:
    with SQLiteStore(store) as opened:
        return [r.operation_id for r in opened.operations()]


@pytest.mark.parametrize("answer", ["n\n", "\n"])
def test_purge_on_a_terminal_asks_and_a_no_deletes_nothing(
    store_with_history: Path, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    monkeypatch.setattr(idemclient._ops_cli, "can_ask", lambda: True)
    result = CliRunner().invoke(
        main, ["ops", "purge", "--store", str(store_with_history), "order-1"], input=answer
    )
    assert result.exit_code == 1
    assert "Delete 1 finished operation(s)" in result.stderr  # not in a piped stdout
    assert "Delete" not in result.stdout
    assert "nothing purged" in result.stderr
    assert _stored(store_with_history) == ["order-1", "order-2"]


def test_purge_on_a_terminal_purges_once_confirmed(
    store_with_history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idemclient._ops_cli, "can_ask", lambda: True)
    result = CliRunner().invoke(
        main, ["ops", "purge", "--store", str(store_with_history), "--older-than", "0"], input="y\n"
    )
    assert result.exit_code == 0, result.stderr
    assert "purged 1" in result.stdout
    assert _stored(store_with_history) == ["order-2"]


def test_purge_with_yes_never_asks(
    store_with_history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idemclient._ops_cli, "can_ask", lambda: True)
    result = CliRunner().invoke(
        main, ["ops", "purge", "--store", str(store_with_history), "--yes", "order-1"]
    )
    assert result.exit_code == 0, result.stderr
    assert "Delete" not in result.stderr
    assert "warning" not in result.stderr
    assert _stored(store_with_history) == ["order-2"]


def test_purge_in_a_script_still_purges_and_warns_to_add_yes(store_with_history: Path) -> None:
    """Scripts written for earlier versions keep working (no terminal: no question)."""
    done = subprocess.run(
        [sys.executable, "-m", "idemclient", "ops", "purge", "--store", str(store_with_history),
         "order-1"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "purged 1" in done.stdout
    assert "deprecated" in done.stderr
    assert "--yes" in done.stderr
    assert _stored(store_with_history) == ["order-2"]


ANSI = "\x1b["


def test_no_colour_in_a_pipe_colour_when_asked_and_none_with_no_color(
    store_with_history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["ops", "list", "--store", str(store_with_history)]
    assert ANSI not in CliRunner().invoke(main, args).stdout  # not a terminal
    coloured = CliRunner().invoke(main, args, color=True).stdout  # as a terminal would be
    assert click.style("succeeded    ", fg="green") in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    assert ANSI not in CliRunner().invoke(main, args, color=True).stdout


def test_colour_on_a_real_terminal_and_none_with_no_color(
    store_with_history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [sys.executable, "-m", "idemclient", "ops", "list", "--store", str(store_with_history)]
    monkeypatch.delenv("NO_COLOR", raising=False)
    code, output = run_in_terminal(argv, columns=200)
    assert code == 0, output
    assert ANSI in output
    monkeypatch.setenv("NO_COLOR", "1")
    code, output = run_in_terminal(argv, columns=200)
    assert code == 0, output
    assert ANSI not in output
    assert "succeeded" in output


def test_show_and_list_say_when_a_look_up_holds_an_operation(store_with_history: Path) -> None:
    # A reconciler holds order-2 for its look-up (or was killed holding it): the row
    # keeps its state, and says that it is held for a look-up, which sends nothing.
    from idemclient import _reconcile

    with SQLiteStore(store_with_history) as store:
        _reconcile.take(store, ManualClock(start=time.time()), "order-2")
    code, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2")
    assert code == 0
    assert "state: indeterminate" in out
    assert "(looking it up on the server: nothing is sent under this lease)" in out
    _, out, _ = run("ops", "show", "--store", str(store_with_history), "order-2", "--json")
    assert json.loads(out)["lease_look_up"] is True
    _, out, _ = run("ops", "list", "--store", str(store_with_history))
    finished, held = out.splitlines()
    assert "indeterminate" in held
    assert "[being looked up until 20" in held
    assert "looked up" not in finished
    _, out, _ = run("ops", "show", "--store", str(store_with_history), "order-1")
    assert "looking it up" not in out


def test_resume_without_the_server_clock_for_a_server_whose_date_is_wrong(
    tmp_path: Path,
) -> None:
    # A server whose Date is forty days ahead (a faked clock, a week-year formatting
    # bug): judged by it, a payment cut off a moment ago is weeks past its key
    # retention, refused for ever by `ops resume`; `--no-server-clock` is the way out
    # that `Client(server_clock=False)` gives code.
    ahead = ManualClock(start=time.time() + 40 * 86400.0)
    path = tmp_path / "ops.db"
    with ReferenceServer(clock=ahead) as server, serve(server) as live:
        server.drop(path="/v1/payments")
        options: dict[str, Any] = {
            "store": path,
            "base_url": live.url,
            "headers": {"Authorization": "Bearer shop-1"},
            "policy": RetryPolicy(max_attempts=1),
        }
        with Client(**options) as c, pytest.raises(Indeterminate):
            c.post("/v1/payments", json=PAYMENT, operation_id="order-2")
        args = ("ops", "resume", "--store", str(path), "--token", "shop-1")
        code, out, _ = run(*args)
        assert code == 3, out
        assert "order-2  indeterminate" in out
        code, out, err = run(*args, "--no-server-clock")
        assert code == 0, err
        assert "order-2  succeeded" in out
        assert sum(1 for entry in server.ledger() if entry.status == "succeeded") == 1


def _batches_store(tmp_path: Path) -> Path:
    """A store holding two months of a payroll (scopes 2026-11 and 2026-12), a row of
    each not sent (a 503) and one maybe applied (its answer lost: long evidence), and one
    merchant payment."""
    from idemclient.batch import Batch, submit

    path = tmp_path / "batches.db"
    server = ReferenceServer()
    with Client(
        store=path,
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer payroll"},
        clock=ManualClock(start=time.time()),
        policy=RetryPolicy(max_attempts=1),
    ) as client:
        for month in ("2026-11", "2026-12"):
            rows = [
                {"ref": f"E{n:04d}", "amount": 100 + n, "currency": "GBP",
                 "value_date": f"{month}-28", "note": "x" * 200}
                for n in range(3)
            ]  # fmt: skip
            first = key_from_identity(f"{month}/E0000", "payout")
            server.answer(503, key=first, retry_after=3600)  # left not sent, waiting
            server.drop(key=key_from_identity(f"{month}/E0001", "payout"))  # maybe applied
            submit(Batch.from_records(rows, reference=month), client, lookup=None)
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1")
    return path


def test_list_lines_fit_120_columns_outside_a_terminal(tmp_path: Path) -> None:
    store = _batches_store(tmp_path)
    code, out, _ = run("ops", "list", "--store", str(store))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 7
    assert all(len(line) <= 120 for line in lines), [len(line) for line in lines]
    assert any(line.endswith("…") for line in lines)  # the evidence, cut
    # The id stays whole, first: what `ops show` takes.
    first = lines[0].split()[0]
    assert first == "batch/payout/2026-11/E0000"
    assert run("ops", "show", "--store", str(store), first)[0] == 0


def test_list_filters_by_batch(tmp_path: Path) -> None:
    store = _batches_store(tmp_path)
    code, out, err = run("ops", "list", "--store", str(store), "--batch", "2026-11")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        f"batch/payout/2026-11/E{n:04d}" for n in range(3)
    ]
    counted = dict(part.rsplit(" ", 1) for part in err.strip().split(", "))
    assert counted["succeeded"] == counted["indeterminate"] == counted["not sent"] == "1"
    assert sum(map(int, counted.values())) == 3  # of that batch only
    _, out, _ = run("ops", "list", "--store", str(store), "--batch", "2026-12", "--unfinished")
    assert [line.split()[0] for line in out.splitlines()] == [
        "batch/payout/2026-12/E0000",
        "batch/payout/2026-12/E0001",
    ]
    _, out, _ = run("ops", "list", "--store", str(store), "--batch", "2026-12", "--json")
    listed = json.loads(out)
    assert len(listed["operations"]) == 3
    assert listed["counts"]["succeeded"] == 1
