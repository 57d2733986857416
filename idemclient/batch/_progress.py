"""The batch command's progress: one line redrawn in place on a terminal, never wider
than the terminal is now; plain lines (the first row, then every tenth) anywhere else.

A redrawn line that is wider than the terminal wraps, and every redraw then leaves a
line behind. So the line is built for the width it is drawn at (read at every redraw:
terminals are resized): the counts that are not zero, a bar in the room left, and
without the bar, or cut, when even that does not fit. click's progress bar sizes only
its bar and lets the rest overflow; rich would fit it, at the price of a dependency
for one line, so the line is drawn here.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from ._progress_counts import BatchProgress

__all__ = ["ProgressView", "counts", "fitted"]

LABEL = "submitting"
#: The label of each phase's line ("sending" is `LABEL`).
_LABELS = {"looking up": "looking up", "sending": LABEL}
#: Redraws at most this often: a hundred thousand rows are not a hundred thousand writes.
_REDRAW = 0.1
_MIN_BAR = 10
_MAX_BAR = 30


def counts(p: BatchProgress) -> str:
    """Every count, for plain lines."""
    if p.phase == "looking up":
        return f"found {p.found}  not found {p.not_found}  retrying {p.retrying}"
    return (
        f"succeeded {p.succeeded}  already done {p.already_done}  replayed {p.replayed}"
        f"  retrying {p.retrying}"
        f"  indeterminate {p.indeterminate}  not sent {p.not_sent}  failed {p.failed}"
    )


def _short_counts(p: BatchProgress) -> str:
    if p.phase == "looking up":
        found = [f"{p.found} found", f"{p.not_found} not found"]
        return ", ".join(found + ([f"{p.retrying} retrying"] if p.retrying else []))
    shown = [f"{p.succeeded} ok"]
    for value, name in (
        (p.already_done, "already done"),
        (p.replayed, "replayed"),
        (p.retrying, "retrying"),
        (p.indeterminate, "unsettled"),
        (p.not_sent, "not sent"),
        (p.failed, "failed"),
    ):
        if value:
            shown.append(f"{value} {name}")
    return ", ".join(shown)


def fitted(p: BatchProgress, width: int) -> str:
    """The progress line, at most `width` characters: pure. The bar takes a third of
    the width (at most `_MAX_BAR`), so it keeps its size while the counts change; the
    counts are cut, not wrapped, when they do not fit."""
    label = _LABELS.get(p.phase, p.phase)
    tail = f" {p.done}/{p.total} {_short_counts(p)}"
    room = min(_MAX_BAR, (width - len(label) - 3) // 3)  # 3: " [" and "]"
    if room < _MIN_BAR:
        return f"{label}{tail}"[: max(0, width)]
    filled = room * p.done // max(1, p.total)
    return f"{label} [{'#' * filled}{'-' * (room - filled)}]{tail}"[:width]


def _terminal_width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size().columns


class ProgressView:
    """Shows `BatchProgress` on `stream` (stderr by default)."""

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        width: Callable[[], int] | None = None,
    ) -> None:
        self.total = total
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()
        self._width = width or (lambda: _terminal_width(self._stream))
        self._last: BatchProgress | None = None
        self._drawn_at = float("-inf")
        self._on_line = False
        self._printed_step = -1
        # Rows tell their progress, and retries their lines (--verbose), from the
        # sending threads: one writer at a time, so no line is cut into another.
        self._lock = threading.RLock()
        #: the stream failed (see `_unless_gone`)
        self._gone = False

    def update(self, progress: BatchProgress) -> None:
        with self._lock:
            self._unless_gone(self._update, progress)

    def _update(self, progress: BatchProgress) -> None:
        if self._last is not None and self._last.phase != progress.phase:
            self._next_phase()
        done_before = self._last.done if self._last else 0
        self._last = progress
        if self._tty:
            now = time.monotonic()
            if now - self._drawn_at >= _REDRAW or progress.done == progress.total:
                self._draw(progress)
                self._drawn_at = now
            return
        step = progress.done * 10 // max(1, progress.total)
        if step != self._printed_step and (progress.done != done_before or progress.done == 0):
            self._printed_step = step
            phase = "" if progress.phase == "sending" else f"{progress.phase} "
            self._stream.write(f"[{phase}{progress.done}/{progress.total}] {counts(progress)}\n")
            self._stream.flush()

    def _next_phase(self) -> None:
        """The counts of another phase begin: the last line goes (what the phase came
        to is said in words), and plain lines start again from the first."""
        if self._on_line:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._on_line = False
        self._last = None
        self._drawn_at = float("-inf")
        self._printed_step = -1

    def _draw(self, progress: BatchProgress) -> None:
        # One column spare: a line that fills the last column wraps on some terminals.
        line = fitted(progress, self._width() - 1)
        self._stream.write(f"\r{line}\x1b[K")
        self._stream.flush()
        self._on_line = True

    def say(self, text: str) -> None:
        """A line of its own, above the progress line (which is drawn again)."""
        with self._lock:
            self._unless_gone(self._say, text)

    def _say(self, text: str) -> None:
        if self._on_line:
            self._stream.write("\r\x1b[K")
        self._stream.write(text + "\n")
        self._stream.flush()
        if self._on_line and self._last is not None:
            self._draw(self._last)

    def close(self) -> None:
        """End the line (the last counts drawn), so what follows starts on its own."""
        with self._lock:
            self._unless_gone(self._close)

    def _unless_gone(self, write: Callable[..., None], *args: Any) -> None:
        """`write(*args)`, unless the stream has failed: the terminal went away (an SSH
        session dropped: SIGHUP), or the pipe's reader closed it. Then nothing more is
        written; the run goes on, and its report is still written."""
        if self._gone:
            return
        try:
            write(*args)
        except OSError:
            self._gone = True

    def _close(self) -> None:
        if self._tty and self._last is not None:
            self._draw(self._last)
        if self._on_line:
            self._stream.write("\n")
            self._stream.flush()
            self._on_line = False
