"""What the commands say reads as one tool: labels aligned, one error style (`error: ...`
on stderr, whichever command or click itself found it), and help that tells when a
webhook secret is made."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from idemclient import Client, ManualClock
from idemclient.cli import main
from idemclient.testing import ReferenceServer

PAYMENT = {"amount": 500, "currency": "EUR", "reference": "inv-9"}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "ops.db"
    with (
        ReferenceServer() as server,
        Client(
            store=path,
            clock=ManualClock(),
            base_url="http://psp.test",
            transport=server.transport,
            headers={"Authorization": "Bearer shop-1"},
        ) as client,
    ):
        client.post("/v1/payments", json=PAYMENT, operation_id="order-1").raise_for_status()
    return path


def test_ops_show_aligns_every_label(store: Path) -> None:
    done = CliRunner().invoke(main, ["ops", "show", "order-1", "--store", str(store)])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert len(lines) >= 15
    colons = {line.index(": ") for line in lines}
    assert len(colons) == 1, done.output  # "last sent (server)" too
    assert any(line.strip().startswith("last sent (server): ") for line in lines)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"(?i)error\b", line)]


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],  # click's own: no such command
        ["batch", "submit", "{tmp}/payroll.csv", "--url", "not-a-url", "--token", "t"],
        ["ops", "show"],  # a missing argument
        ["ops", "show", "order-1", "--store", "{tmp}/missing.db"],  # the command's own
    ],
)
def test_every_error_reads_the_same(args: list[str], tmp_path: Path) -> None:
    done = CliRunner().invoke(main, [arg.format(tmp=tmp_path) for arg in args])
    assert done.exit_code == 2, done.output
    [error] = _errors(done.stderr)
    assert error.startswith("error: "), done.stderr
    assert "Error:" not in done.stderr


def test_the_server_command_reports_errors_in_the_same_style() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = CliRunner().invoke(main, ["server", "--host", "127.0.0.1", "--port", str(port)])
    assert done.exit_code != 0
    [error] = _errors(done.stderr)
    assert error.startswith(f"error: cannot listen on 127.0.0.1:{port}"), done.stderr


def test_server_help_tells_when_a_webhook_secret_is_generated() -> None:
    done = CliRunner().invoke(main, ["server", "--help"], terminal_width=200)
    assert done.exit_code == 0
    text = " ".join(done.output.split())
    assert "a secret is generated when the server starts with --webhook-url" in text
    assert "printed to stderr" in text
