"""The batch command's progress: one line that fits the terminal, plain lines elsewhere."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from idemclient.batch import BatchProgress
from idemclient.batch._progress import ProgressView, fitted
from idemclient.testing import LiveServer, serve

from ..batch.support import command, key_of, payroll


def progress(done: int, retrying: int = 0, total: int = 20, **counts: int) -> BatchProgress:
    values = {"replayed": 0, "indeterminate": 0, "not_sent": 0, "failed": 0, **counts}
    return BatchProgress(total=total, done=done, succeeded=done, retrying=retrying, **values)


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with serve() as running:
        yield running


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn(output: str) -> list[str]:
    """What each redraw left on the screen: the text between carriage returns and
    newlines, with the erase-to-end-of-line sequence taken out."""
    return [part for part in re.split(r"[\r\n]", output.replace("\x1b[K", "")) if part]


def test_plain_lines_every_tenth_when_not_a_terminal() -> None:
    err = io.StringIO()
    view = ProgressView(20, stream=err)
    for done in range(1, 21):
        view.update(progress(done, retrying=1 if done < 20 else 0))
    view.close()
    lines = err.getvalue().splitlines()
    assert len(lines) == 11  # the first row, then every tenth of the batch
    assert lines[0] == (
        "[1/20] succeeded 1  already done 0  replayed 0  retrying 1  indeterminate 0"
        "  not sent 0  failed 0"
    )
    assert lines[-1].startswith("[20/20] succeeded 20")


@pytest.mark.parametrize("columns", [20, 40, 60, 80, 120, 200])
def test_the_line_fits_the_terminal_it_is_drawn_on(columns: int) -> None:
    err = Terminal()
    view = ProgressView(100_000, stream=err, width=lambda: columns)
    big = progress(
        99_999,
        retrying=16,
        total=100_000,
        replayed=12_345,
        already_done=50_000,
        indeterminate=321,
        not_sent=4,
        failed=7,
    )
    view.update(big)
    view.say("looking up 4 row(s) on the server")
    view.close()
    shown = drawn(err.getvalue())
    bars = [part for part in shown if part.startswith("submitting")]
    assert len(bars) == 3  # drawn, drawn again under the message, and at the end
    assert all(len(part) < columns for part in bars), [len(p) for p in bars]
    assert "looking up 4 row(s) on the server" in shown  # a line of its own
    assert err.getvalue().endswith("\n")  # what follows starts on its own line


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (80, "submitting [" + "#" * 11 + "-" * 11 + "] 5/10 5 ok, 2 retrying"),
        (200, "submitting [" + "#" * 15 + "-" * 15 + "] 5/10 5 ok, 2 retrying"),
        (50, "submitting [######------] 5/10 5 ok, 2 retrying"),
        (40, "submitting 5/10 5 ok, 2 retrying"),
        (20, "submitting 5/10 5 ok"),
        (0, ""),
    ],
)
def test_fitted(width: int, expected: str) -> None:
    line = fitted(progress(5, retrying=2, total=10), width)
    assert line == expected
    assert len(line) <= width


def run_in_terminal(argv: list[str], columns: int) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal of `columns` columns as its stdout and stderr;
    its exit code and everything it wrote. Bounded: at most 120 s of silence."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child)
    os.close(child)
    chunks = []
    try:
        while select.select([parent], [], [], 120)[0]:
            try:
                data = os.read(parent, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(parent)
    return process.wait(timeout=60), b"".join(chunks).decode()


def test_the_commands_progress_fits_an_80_column_terminal(live: LiveServer, tmp_path: Path) -> None:
    file = tmp_path / "payroll.csv"
    file.write_text(payroll(150))
    for n in range(0, 150, 10):  # some rows retry, so the counts change as it runs
        live.server.answer(503, key=key_of(f"2026-11-E{1000 + n}"), retry_after_ms=50)
    code, output = run_in_terminal(
        command(live.url, file, tmp_path / "s.db", "--concurrency", "2"), columns=80
    )
    assert code == 0, output
    assert "submitting [" in output
    # No redraw wider than the terminal, so none wraps and leaves a line behind: the
    # lines left are the look-up's two, the bar's last, and the summary.
    assert all(len(part) <= 80 for part in drawn(output) if "submitting" in part)
    assert len(output.replace("\r\n", "\n").strip().split("\n")) <= 6, output


def looking(done: int, total: int = 20, found: int = 0, retrying: int = 0) -> BatchProgress:
    return BatchProgress(
        total=total,
        done=done,
        succeeded=0,
        replayed=0,
        retrying=retrying,
        indeterminate=0,
        not_sent=0,
        failed=0,
        phase="looking up",
        found=found,
        not_found=done - found,
    )


def test_the_look_ups_have_a_line_of_their_own_before_the_sends() -> None:
    assert fitted(looking(10, found=2, retrying=1), 80) == (
        "looking up [" + "#" * 11 + "-" * 11 + "] 10/20 2 found, 8 not found, 1 retrying"
    )
    err = Terminal()
    view = ProgressView(20, stream=err, width=lambda: 80)
    for done in range(1, 21):
        view.update(looking(done, found=done // 4))
    view.update(progress(1))
    view.close()
    output = err.getvalue()
    last_look_up = output.rindex("looking up [")
    first_send = output.index("submitting [")
    # The look-ups' line is taken away before the sends' is drawn: none is left half.
    assert last_look_up < output.index("\r\x1b[K", last_look_up) < first_send


def test_the_look_ups_print_plain_lines_every_tenth_when_not_a_terminal() -> None:
    err = io.StringIO()
    view = ProgressView(20, stream=err)
    for done in range(1, 21):
        view.update(looking(done))
    for done in range(1, 21):
        view.update(progress(done))
    view.close()
    lines = err.getvalue().splitlines()
    assert lines[0] == "[looking up 1/20] found 0  not found 1  retrying 0"
    assert lines[10] == "[looking up 20/20] found 0  not found 20  retrying 0"
    assert lines[11].startswith("[1/20] succeeded 1")
    assert len(lines) == 22
