"""The batch command's progress: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

import pytest

from idemclient.batch import BatchProgress
from idemclient.batch._cli import _ProgressView


def progress(done: int, retrying: int = 0) -> BatchProgress:
    return BatchProgress(
        total=20, done=done, succeeded=done, replayed=0, retrying=retrying,
        indeterminate=0, not_sent=0, failed=0,
    )  # fmt: skip


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_every_tenth_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    view = _ProgressView(20)
    for done in range(1, 21):
        view.update(progress(done, retrying=1 if done < 20 else 0))
    view.close()
    lines = err.getvalue().splitlines()
    assert len(lines) == 11  # the first row, then every tenth of the batch
    assert lines[0] == (
        "[1/20] succeeded 1  replayed 0  retrying 1  indeterminate 0  not sent 0  failed 0"
    )
    assert lines[-1].startswith("[20/20] succeeded 20")


def test_a_bar_with_live_counts_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    view = _ProgressView(20)
    view.update(progress(5, retrying=2))
    view.update(progress(20))
    view.close()
    shown = err.getvalue()
    assert "submitting" in shown
    assert "20/20" in shown
    assert "retrying 2" in shown
