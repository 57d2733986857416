"""Killing a real process at a chosen point, as a crash would: the tests that SIGKILL
the batch command part way and run it again."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any


def kill_when(
    process: subprocess.Popen[Any],
    reached: Callable[[], bool],
    *,
    limit: float = 60.0,
    turn: float = 0.005,
) -> bool:
    """SIGKILL `process` as soon as `reached()` is true; False if it ended first.

    A bounded poll: each turn waits on the process itself for at most `turn` seconds
    (the process's own progress, not a sleep), for `limit` seconds in all.
    """
    for _ in range(int(limit / turn)):
        if reached():
            process.kill()
            process.communicate(timeout=60)
            return True
        try:
            process.wait(timeout=turn)
        except subprocess.TimeoutExpired:
            continue
        process.communicate(timeout=60)
        return False
    process.kill()
    process.communicate(timeout=60)
    raise AssertionError("the process neither finished nor reached its kill point")
