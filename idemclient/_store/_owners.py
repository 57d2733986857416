"""Lease owners: who holds an operation, and whether that owner can still be alive.

An owner names a host, a process and one call: ``host:pid:token:n``. The token is
random per process, so a recycled pid never passes for an old owner. A lease held by a
process of this host that no longer exists is taken over at once; any other lease is
respected until it expires.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import threading

__all__ = ["new_owner", "owner_is_dead"]

_state_lock = threading.Lock()
_process: tuple[int, str] | None = None
_counter = itertools.count(1)
_HOST = socket.gethostname().replace(":", "_")


def new_owner() -> str:
    """A fresh owner name for one call of this process (fork-safe)."""
    global _process
    pid = os.getpid()
    with _state_lock:
        if _process is None or _process[0] != pid:
            _process = (pid, secrets.token_hex(6))
        token = _process[1]
    return f"{_HOST}:{pid}:{token}:{next(_counter)}"


def owner_is_dead(owner: str) -> bool:
    """True only when `owner` was a process of this host that has exited."""
    host, _, rest = owner.partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # exists under another user, or cannot tell: treat as alive
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    # A killed child that its parent has not reaped yet still answers kill(pid, 0).
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return False
    return bool(fields) and fields[0] == b"Z"
