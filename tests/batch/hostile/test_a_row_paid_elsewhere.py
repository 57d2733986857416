"""A row is done only where it was paid: at the origin it was sent to (scheme, host,
port), with the credentials it was sent with. A row the store holds as finished at
another origin (a sandbox), or with other credentials (a test key on the same URL,
another account), is looked up where this run sends it: found there, it is done;
not found, the run is refused before anything is sent (exit 2), naming where it was
paid, and no row of the report says it succeeded. Without look-ups it is refused
outright. The credentials themselves are never written: only a salted, one-way digest
of them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx

from idemclient import Client, ManualClock
from idemclient.batch import read_batch, submit
from idemclient.clock import SystemClock
from idemclient.testing import LiveServer, ReferenceServer, serve

from ..support import command, payroll, read_report, run

ROWS = 3


def test_rows_paid_at_another_url_are_refused_here_not_reported_succeeded(
    live: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    sandbox = ReferenceServer(clock=SystemClock(), db=str(tmp_path / "sandbox.sqlite3"))
    with sandbox, serve(sandbox) as test_run:
        tried = run(command(test_run.url, tmp_path / "nov.csv", store))
        assert tried.returncode == 0, tried.stderr
        assert len(sandbox.ledger()) == ROWS
        # Now for real: production (`live`), the same file and store.
        for extra in ((), ("--no-lookup",)):
            done = run(
                command(live.url, tmp_path / "nov.csv", store, *extra, report=tmp_path / "r.csv")
            )
            assert done.returncode == 2, done.stdout + done.stderr
            assert f"was paid (HTTP 201) at {test_run.url}" in done.stderr
            assert len(live.server.ledger()) == 0
            lines = read_report(tmp_path / "r.csv")
            assert [line["state"] for line in lines] == ["not_sent"] * ROWS
            assert all(test_run.url in line["reason"] for line in lines)
    # With a store of its own, production pays each row once.
    fresh = run(command(live.url, tmp_path / "nov.csv", tmp_path / "production.db"))
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert len(live.server.ledger()) == ROWS


def test_rows_paid_in_test_mode_are_refused_in_live_mode(live: LiveServer, tmp_path: Path) -> None:
    # Stripe's way: one URL, the mode is the key (sk_test_... then sk_live_...). The
    # reference server keeps each token's payments apart, as Stripe keeps modes apart.
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    tried = run(command(live.url, tmp_path / "nov.csv", store, token="sk_test_abc"))
    assert tried.returncode == 0, tried.stderr
    for extra in ((), ("--no-lookup",)):
        done = run(
            command(
                live.url, tmp_path / "nov.csv", store, *extra, token="sk_live_xyz",
                report=tmp_path / "r.csv",
            )
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert "with other credentials than this run's" in done.stderr
        assert not [e for e in live.server.ledger() if e.client == "sk_live_xyz"]
        lines = read_report(tmp_path / "r.csv")
        assert all(line["state"] != "succeeded" for line in lines), lines
    # The test key itself still finds them done.
    again = run(command(live.url, tmp_path / "nov.csv", store, token="sk_test_abc"))
    assert again.returncode == 0, again.stdout + again.stderr
    # Neither token is anywhere in the store.
    for leftover in tmp_path.glob("b.db*"):
        content = leftover.read_bytes()
        assert b"sk_test_abc" not in content
        assert b"sk_live_xyz" not in content


def test_a_wrong_token_on_a_paid_file_is_told_to_check_it_not_to_take_a_new_store(
    live: LiveServer, tmp_path: Path
) -> None:
    # Another store would pay the whole file again under the wrong token's account.
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    store = tmp_path / "b.db"
    paid = run(command(live.url, tmp_path / "nov.csv", store, token="payroll-ops"))
    assert paid.returncode == 0, paid.stderr
    for extra in ((), ("--no-lookup",)):
        wrong = run(command(live.url, tmp_path / "nov.csv", store, *extra, token="typo-ops"))
        assert wrong.returncode == 2, wrong.stdout + wrong.stderr
        assert "check the token" in wrong.stderr
        assert "--store" not in wrong.stderr, wrong.stderr
        assert "store of its own" not in wrong.stderr
    assert len(live.server.ledger()) == ROWS
    right = run(command(live.url, tmp_path / "nov.csv", store, token="payroll-ops"))
    assert right.returncode == 0, right.stdout + right.stderr
    assert len(live.server.ledger()) == ROWS


class OneAccount:
    """A PSP where every token is one account's: a rotated token sees its payments."""

    def __init__(self) -> None:
        self.payments: list[dict[str, object]] = []
        self.posts = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            wanted = request.url.params["reference"]
            found = [p for p in self.payments if p["reference"] == wanted]
            return httpx.Response(200, json={"data": found})
        self.posts += 1
        body = json.loads(request.content)
        self.payments.append({**body, "id": f"po_{self.posts}", "status": "succeeded"})
        return httpx.Response(201, json=self.payments[-1])


def test_a_rotated_token_finds_the_rows_done_by_their_look_up(tmp_path: Path) -> None:
    (tmp_path / "nov.csv").write_text(payroll(ROWS))
    batch = read_batch(tmp_path / "nov.csv")
    psp = OneAccount()
    for token in ("sk_live_old", "sk_live_new", "sk_live_new"):
        with Client(
            store=tmp_path / "b.db",
            clock=ManualClock(),
            transport=httpx.MockTransport(psp.handler),
            base_url="https://psp.test",
            headers={"Authorization": f"Bearer {token}"},
        ) as client:
            report = submit(batch, client)
        assert report.exit_code == 0, report.summary()
    assert psp.posts == ROWS
    assert all("found on the server by look-up" in row.reason for row in report.rows)


def test_the_store_keeps_a_salted_digest_of_the_credentials_never_them(tmp_path: Path) -> None:
    (tmp_path / "nov.csv").write_text(payroll(1))
    psp = OneAccount()
    with Client(
        store=tmp_path / "b.db",
        clock=ManualClock(),
        transport=httpx.MockTransport(psp.handler),
        base_url="https://user:pa55word@psp.test",
        headers={"X-Api-Key": "key_SECRET_1"},
        auth=httpx.BasicAuth("sk_live_SECRET_2", ""),
    ) as client:
        assert submit(read_batch(tmp_path / "nov.csv"), client).exit_code == 0
    with sqlite3.connect(tmp_path / "b.db") as conn:
        (url,) = conn.execute("SELECT url FROM operations").fetchone()
    assert url.startswith("https://psp.test/v1/payouts#sent-as=v1.")
    content = b"".join(p.read_bytes() for p in tmp_path.glob("b.db*"))
    for secret in (b"pa55word", b"key_SECRET_1", b"sk_live_SECRET_2", b"c2tfbGl2ZV9TRUNSRVRfMj"):
        assert secret not in content
