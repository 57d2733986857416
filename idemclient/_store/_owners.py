"""Lease owners: who holds an operation, and whether that owner can still be alive.

An owner names a host, a process and one call: ``host:pid:token:n``. The token is
random per process, so a recycled pid never passes for an old owner. A lease held by a
process of this host that no longer exists is taken over at once; so is one held by a
call of this very process that has ended (its last write may have failed, leaving the
lease behind): a call that is gone never holds its own process back. Any other lease
is respected until it expires.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import threading

__all__ = ["gone_in_words", "new_owner", "of_this_process", "owner_is_dead", "release_owner"]

_state_lock = threading.Lock()
_process: tuple[int, str] | None = None
_counter = itertools.count(1)
#: owners of this process whose call is still running
_live: set[str] = set()
_HOST = socket.gethostname().replace(":", "_")


def new_owner() -> str:
    """A fresh owner name for one call of this process (fork-safe), alive until
    `release_owner` says the call has ended."""
    with _state_lock:
        pid, token = _this_process()
        owner = f"{_HOST}:{pid}:{token}:{next(_counter)}"
        _live.add(owner)
    return owner


def release_owner(owner: str) -> None:
    """The call named `owner` has ended: a lease it left behind is free at once."""
    with _state_lock:
        _live.discard(owner)


def _this_process() -> tuple[int, str]:
    global _process
    pid = os.getpid()
    if _process is None or _process[0] != pid:
        _process = (pid, secrets.token_hex(6))
        _live.clear()  # a forked child runs none of its parent's calls
    return _process


def of_this_process(owner: str) -> bool:
    """Whether `owner` names a call of this very process (alive or ended)."""
    host, _, rest = owner.partition(":")
    pid_text, _, rest = rest.partition(":")
    token, _, _ = rest.partition(":")
    with _state_lock:
        pid, ours = _this_process()
    return host == _HOST and pid_text == str(pid) and token == ours


def owner_is_dead(owner: str) -> bool:
    """True only when `owner` was a process of this host that has exited, or a call of
    this process that has ended."""
    host, _, rest = owner.partition(":")
    pid_text, _, rest = rest.partition(":")
    token, _, _ = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        with _state_lock:
            _, ours = _this_process()
            # Another token under our pid: a process before us that had the same pid.
            return token != ours or owner not in _live
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


def gone_in_words(owner: str) -> str:
    """What became of `owner`, one that `owner_is_dead` found dead, for a message."""
    _, _, rest = owner.partition(":")
    pid_text, _, rest = rest.partition(":")
    token, _, _ = rest.partition(":")
    with _state_lock:
        pid, ours = _this_process()
    if pid_text == str(pid) and token == ours:
        return "the call of this process that held it has ended"
    return f"the process that held it (pid {pid_text} on this host) has exited"
