"""Secrets never reach the store file: not the database, not its WAL, not its SHM.

Runs that carry credentials every way an application might (Authorization from
headers and from an httpx auth flow, Basic auth, a cookie jar, an explicit Cookie,
Proxy-Authorization, X-Api-Key, a header the user names as secret, and Set-Cookie
and secret headers in the server's answers), through `Client`, `wrap()`, a resume,
the batch command and `idemclient ops resume`; with faults, so that operations are
retried, left indeterminate and resumed. The files are read while the store is open
(and after a SIGKILL, which leaves the WAL behind), and again after it is closed.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import idemclient
from idemclient import Client, Indeterminate, ManualClock, NotSent, RetryPolicy, State
from idemclient.cli import main
from idemclient.clock import SystemClock
from idemclient.store import SQLiteStore
from idemclient.testing import LiveServer, ReferenceServer, serve

from .conftest import Figures
from .support import PATH, payment


def secret(name: str) -> str:
    return f"{name}_{secrets.token_hex(12)}"


class BearerFlow(httpx.Auth):
    """An auth flow that adds the token itself (as SDKs built on httpx do)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def store_bytes(path: Path) -> bytes:
    """The store and its companions, as they are on disk right now."""
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def assert_absent(raw: bytes, values: list[str], *, marker: str) -> None:
    assert marker.encode() in raw, "the bytes read are not this store's"
    for value in values:
        for form in (value.encode(), base64.b64encode(value.encode())):
            assert form not in raw, value


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=ManualClock()) as running:
        yield running


def test_client_and_resume_write_no_secret(
    server: ReferenceServer, tmp_path: Path, figures: Figures
) -> None:
    token, cookie, jar, signature = (secret(n) for n in ("bearer", "cookie", "jar", "sig"))
    api_key, proxy, password = (secret(n) for n in ("apikey", "proxy", "password"))
    set_cookie, answer_signature = secret("setcookie"), secret("answersig")
    values = [token, cookie, jar, signature, api_key, proxy, password, set_cookie]
    values += [answer_signature, f"merchant:{password}"]
    path = tmp_path / "payments.db"
    store = SQLiteStore(path, secret_headers={"X-Signature"})
    # The server answers one payment with secrets of its own in the headers.
    server.answer(
        201,
        key="k-answer",
        headers={"Set-Cookie": f"sid={set_cookie}; HttpOnly", "X-Signature": answer_signature},
        body=b'{"id": "pay_scripted", "reference": "r-answer"}',
    )
    server.drop(path=PATH, times=4)  # two operations end indeterminate, to be resumed
    with Client(
        store=store,
        clock=ManualClock(),
        policy=RetryPolicy(max_attempts=2),
        transport=server.transport,
        base_url="http://psp.test",
        auth=BearerFlow(token),
        cookies={"session": jar},
        headers={"X-Signature": signature, "X-Api-Key": api_key, "Proxy-Authorization": proxy},
    ) as client:
        for n in range(2):
            with pytest.raises(Indeterminate):
                client.post(PATH, json=payment(f"r-lost-{n}"), operation_id=f"lost-{n}")
        answered = client.post(PATH, json=payment("r-answer"), key="k-answer")
        assert answered.state is State.SUCCEEDED
        client.post(PATH, json=payment("r-cookie"), headers={"Cookie": f"c={cookie}"})
        with pytest.raises(NotSent, match="401"):  # Basic is refused: credentials, not sent
            client.post(PATH, json=payment("r-basic"), auth=("merchant", password))
        # The two lost ones, and the refused one: resumed with the live client's token.
        assert [o.state for o in client.resume()] == [State.SUCCEEDED] * 3
        assert_absent(store_bytes(path), values, marker="r-lost-1")  # open: WAL and SHM
        assert Path(f"{path}-wal").exists()
    store.close()
    assert_absent(store_bytes(path), values, marker="r-lost-1")
    figures.count("secrets", secret_values=len(values), doors=2, store_reads=2)


def test_wrap_and_its_resume_write_no_secret(
    server: ReferenceServer, tmp_path: Path, figures: Figures
) -> None:
    token, signature, cookie = secret("bearer"), secret("sig"), secret("jar")
    path = tmp_path / "wrapped.db"
    store = SQLiteStore(path, secret_headers={"x-signature"})
    server.drop(path=PATH, times=2)
    http = httpx.Client(
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": f"Bearer {token}", "X-Signature": signature},
        cookies={"session": cookie},
    )
    with idemclient.wrap(
        http, store=store, clock=ManualClock(), policy=RetryPolicy(max_attempts=2)
    ):
        with pytest.raises(Indeterminate):
            http.post(PATH, json=payment("r-wrapped"))
        assert http.post(PATH, json=payment("r-second")).status_code == 201
        [resumed] = idemclient.resume(http)
        assert resumed.state is State.SUCCEEDED
        assert_absent(store_bytes(path), [token, signature, cookie], marker="r-wrapped")
    store.close()
    assert_absent(store_bytes(path), [token, signature, cookie], marker="r-wrapped")
    figures.count("secrets", secret_values=3, doors=2, store_reads=2)


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with ReferenceServer(clock=SystemClock()) as server, serve(server) as running:
        yield running


def test_the_batch_command_and_ops_resume_write_no_secret(
    live: LiveServer, tmp_path: Path, figures: Figures
) -> None:
    # One token, given every way the commands take it (a flag, the environment): the
    # server knows a merchant by its token, so rotating it would make another merchant.
    token = secret("sk_live")
    csv = tmp_path / "payroll-secret.csv"
    csv.write_text(
        "ref,amount,currency,value_date\n"
        + "".join(f"row-{n},{100 + n},EUR,2026-11-30\n" for n in range(120))
    )
    store = tmp_path / "batches.db"

    def argv(*extra: str) -> list[str]:
        command = [sys.executable, "-m", "idemclient", "batch", "submit", str(csv)]
        options = ["--url", live.url, "--store", str(store), "--max-attempts", "1"]
        return [*command, *options, "--concurrency", "4", *extra]

    # A run killed half way: SQLite's WAL and SHM stay on disk as the process left them.
    for n in range(6):  # by key: the faults meet the payouts, not the look-ups
        live.server.drop(key=idemclient.key_from_identity(f"row-{n}", "payout"))
    process = subprocess.Popen(
        argv("--token", token), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    # Bounded poll: each turn waits on the process itself; the ledger says how far it got.
    for _ in range(2000):
        if len(live.server.ledger()) >= 40 or process.poll() is not None:
            break
        try:
            process.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            continue
    process.kill()
    process.wait(timeout=60)
    assert Path(f"{store}-wal").exists()
    assert_absent(store_bytes(store), [token], marker="row-1")

    # The token from the environment this time; drops leave rows indeterminate.
    done = subprocess.run(
        argv(), capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "IDEMCLIENT_TOKEN": token},
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    resumed = CliRunner().invoke(main, ["ops", "resume", "--store", str(store), "--token", token])
    assert resumed.exit_code == 0, resumed.output
    final = subprocess.run(
        argv("--token", token), capture_output=True, text=True, timeout=120, check=False
    )
    assert final.returncode == 0, final.stderr
    assert len(live.server.ledger()) == 120
    assert_absent(store_bytes(store), [token], marker="row-119")
    figures.count("secrets", secret_values=1, doors=3, store_reads=2)
