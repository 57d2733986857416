"""Real processes for the tests: a script run in a Python of its own (`python_lines`),
and killing a process at a chosen point, as a crash would (the tests that SIGKILL the
batch command part way and run it again)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def python_lines(script: str, *argv: str, timeout: float = 120.0) -> list[str]:
    """Run `script` in a fresh interpreter that imports what this one does, with `argv`;
    the lines it printed. It must exit 0 (else its stderr is the failure), within
    `timeout` seconds (a bound on a test gone wrong, never a wait the test relies on)."""
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


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
