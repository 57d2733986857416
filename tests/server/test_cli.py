"""`idemclient server` as a real process: ready fast, serves, stops cleanly on signals.

The child's stdout carries one ready line; each wait on it is bounded (`spawn`'s ready
timeout, `communicate(timeout=...)`), and work a child finishes in its own time is
awaited on the webhook it sends (`WebhookCatcher`), bounded too: nothing polls.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from idemclient.cli import main
from idemclient.testing import SandboxClient, spawn

from .server_helpers import BODY, WebhookCatcher

AUTH = {"Authorization": "Bearer alice"}


def _post(url: str, key: str, timeout: float = 10.0) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/payments", json=BODY, headers={**AUTH, "Idempotency-Key": key}, timeout=timeout
    )


def test_the_server_command_is_registered_and_documents_its_options() -> None:
    result = CliRunner().invoke(main, ["server", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--port", "--host", "--db", "--lease", "--key-ttl", "--recovery-interval"):
        assert option in result.output
    assert "127.0.0.1" in result.output  # loopback by default


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_server_starts_fast_serves_and_stops_cleanly_on_a_signal(stop: signal.Signals) -> None:
    started = time.monotonic()
    with spawn() as server:
        ready_after = time.monotonic() - started
        assert server.url.startswith("http://127.0.0.1:")
        first = _post(server.url, "k-cli")
        assert first.status_code == 201
        assert _post(server.url, "k-cli").content == first.content
        server.process.send_signal(stop)
        out, err = server.process.communicate(timeout=20)
    assert server.process.returncode == 0, err
    assert "listening on" not in out.replace(server.url, "")  # one ready line, nothing else
    assert err.rstrip().endswith("idemclient reference server stopped")
    assert "Traceback" not in err
    # "Ready in under a second" on an idle machine; CI gets generous headroom.
    assert ready_after < 10


def test_state_in_a_database_file_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "psp.sqlite3"
    with spawn(db=db) as first_server:
        original = _post(first_server.url, "k-file")
        assert Path(f"{db}-wal").exists()  # WAL mode, written to
    assert first_server.process.returncode == 0
    # A clean shutdown closed the database: SQLite checkpointed and removed the WAL.
    assert not Path(f"{db}-wal").exists()
    with spawn(db=db) as second_server:
        replay = _post(second_server.url, "k-file")
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.content == original.content


def test_a_killed_server_leaves_work_that_the_next_one_recovers_exactly_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "psp.sqlite3"
    with spawn(db=db, lease=0.2, recovery_interval=0) as doomed:
        with SandboxClient(doomed.url) as sandbox:
            sandbox.crash("EXT2_CALLED")  # E2 applied it; the outcome is not recorded
        with pytest.raises(httpx.RemoteProtocolError):
            _post(doomed.url, "k-killed")
        doomed.process.kill()  # the whole worker process dies, SIGKILL, no shutdown
        doomed.process.communicate(timeout=20)
    with (
        WebhookCatcher() as webhooks,
        spawn(db=db, lease=0.2, recovery_interval=0.05) as heir,
        SandboxClient(heir.url) as sandbox,
    ):
        # The heir's background worker must take the row over once the lease (0.2 s of
        # real time) has expired: real time in another process. Finishing the payment
        # queues its webhook event, which the heir's delivery loop sends here: wait for
        # that, bounded, rather than polling the ledger.
        sandbox.set_webhook_endpoint(webhooks.url)
        assert webhooks.arrived.wait(timeout=20), "the heir did not finish the payment"
        [entry] = sandbox.ledger()
        assert entry.key_state == "finished"
        assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
        assert (entry.ext2_calls, entry.journal) == (1, ("H1", "H2", "H3"))
        replay = _post(heir.url, "k-killed")
        assert replay.headers["idempotent-replayed"] == "true"


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["server", "--port", str(port)])
    assert result.exit_code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.output


def test_an_unusable_database_path_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "psp.sqlite3"
    result = CliRunner().invoke(main, ["server", "--port", "0", "--db", str(missing)])
    assert result.exit_code != 0
    assert "cannot open the database" in result.output


def test_the_module_runs_as_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "idemclient.testing", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "--key-ttl" in result.stdout
