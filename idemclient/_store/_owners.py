"""Lease owners: who holds an operation, and whether that owner can still be alive.

An owner names a host, a process and one call: ``host:pid@space:token:n``. The token is
random per process, so a recycled pid never passes for an old owner. `space` says where
the pid means that process: the boot of the machine (its boot id), the PID namespace
(its inode) and the process's start time (ticks since boot). Two containers may share a
hostname and not a PID namespace: a pid of the other one means nothing here, so a
process is judged by its pid only when the owner's boot and namespace are this
process's own, and a live process under the same pid with another start time is a
recycled pid, not the owner.

A lease held by a process of this host and namespace that no longer exists is taken
over at once; so is one held by a call of this very process that has ended (its last
write may have failed, leaving the lease behind): a call that is gone never holds its
own process back. A call that has ended with a write of its own still queued (an async
client's final answer, written behind it: `hold_owner`) holds its lease until that
write has run. Any other lease is respected until it expires: another host's,
another namespace's, one written where the namespace cannot be read, and one named by
an earlier version (``host:pid:token:n``, which said nothing of its namespace).

A forked child is a process of its own: it names itself afresh (its pid, a new token,
its start time) and runs none of its parent's calls, so that it never presents its
parent's identity, nor takes a live lease of its parent's for one of its own ended
calls' (`owner_is_dead`). The lock of this module is made afresh in it too: a thread
of the parent that held it as the process forked does not exist in the child, and the
child's first call would wait on it for ever (`_after_fork_in_child`).
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import sys
import threading
from dataclasses import dataclass

__all__ = [
    "gone_in_words",
    "hold_owner",
    "let_go_owner",
    "new_owner",
    "of_this_process",
    "owner_is_dead",
    "release_owner",
]

_state_lock = threading.Lock()
_process: tuple[int, str, str] | None = None
_counter = itertools.count(1)
#: owners of this process whose call is still running
_live: set[str] = set()
#: owners of this process whose call has ended with a write of theirs still queued
#: (an async client's final answer, written behind it): alive until it has run, with
#: how many such writes each has
_behind: dict[str, int] = {}
_HOST = socket.gethostname().replace(":", "_")
#: written where the boot or the PID namespace cannot be read: no pid of it is judged
_UNKNOWN = "?"


@dataclass(frozen=True, slots=True)
class _Owner:
    host: str
    pid: int
    #: boot and namespace (`_space`), None for a name of an earlier version
    space: str | None
    #: the process's start time, in ticks since boot ("" when not known)
    started: str
    token: str


def _parse(owner: str) -> _Owner | None:
    host, _, rest = owner.partition(":")
    pid_text, _, rest = rest.partition(":")
    token, _, _ = rest.partition(":")
    pid_text, at, where = pid_text.partition("@")
    if not pid_text.isdigit():
        return None
    if not at:
        return _Owner(host, int(pid_text), None, "", token)
    space, _, started = where.rpartition(".")
    return _Owner(host, int(pid_text), space or _UNKNOWN, started, token)


def new_owner() -> str:
    """A fresh owner name for one call of this process (fork-safe), alive until
    `release_owner` says the call has ended."""
    with _state_lock:
        pid, token, where = _this_process()
        owner = f"{_HOST}:{pid}@{where}:{token}:{next(_counter)}"
        _live.add(owner)
    return owner


def release_owner(owner: str) -> None:
    """The call named `owner` has ended: a lease it left behind is free at once."""
    with _state_lock:
        _live.discard(owner)


def hold_owner(owner: str) -> None:
    """A write of `owner`'s is queued to run after its call ends: the lease it holds
    stays its own, in this process too, until `let_go_owner` says the write has run."""
    with _state_lock:
        _behind[owner] = _behind.get(owner, 0) + 1


def let_go_owner(owner: str) -> None:
    """A write `hold_owner` announced has run (landed or failed)."""
    with _state_lock:
        left = _behind.pop(owner, 0) - 1
        if left > 0:
            _behind[owner] = left


def _this_process() -> tuple[int, str, str]:
    global _process
    pid = os.getpid()
    if _process is None or _process[0] != pid:
        where = f"{_space()}.{_started(pid) or ''}"
        _process = (pid, secrets.token_hex(6), where)
        _live.clear()  # a forked child runs none of its parent's calls
        _behind.clear()  # nor its writes
    return _process


def _space() -> str:
    """Where a pid of this process names it: its machine's boot and its PID namespace.
    Without PID namespaces (not Linux), the platform's name stands for both, as before
    namespaces a host's pid named one process; on Linux, one that cannot be read is
    unknown, and no pid written under it is ever judged."""
    if not sys.platform.startswith("linux"):
        return sys.platform
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            boot = file.read().strip().replace("-", "")
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except (OSError, UnicodeDecodeError):
        return _UNKNOWN
    inode = namespace.rpartition("[")[2].rstrip("]")
    if not boot.isalnum() or not inode.isdigit():
        return _UNKNOWN
    return f"{boot}-{inode}"


def _started(pid: int) -> str | None:
    """When process `pid` (of this namespace) started, in ticks since boot; None when
    it cannot be read (no such process, or no /proc)."""
    fields = _stat(pid)
    return None if fields is None else _started_of(fields)


def _stat(pid: int) -> list[bytes] | None:
    # The fields after the command's name, which may hold spaces and parentheses.
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None


def of_this_process(owner: str) -> bool:
    """Whether `owner` names a call of this very process (alive or ended)."""
    parsed = _parse(owner)
    with _state_lock:
        pid, token, _ = _this_process()
    return (
        parsed is not None
        and parsed.space is not None
        and parsed.host == _HOST
        and parsed.pid == pid
        and parsed.token == token
    )


def owner_is_dead(owner: str) -> bool:
    """True only when `owner` was a process of this host and PID namespace that has
    exited, or a call of this process that has ended."""
    parsed = _parse(owner)
    if parsed is None or parsed.host != _HOST or parsed.space is None:
        return False  # another host's, or an earlier version's: its lease says
    with _state_lock:
        pid, ours, where = _this_process()
        space = where.rpartition(".")[0]
        if parsed.space != space or space == _UNKNOWN:
            return False  # a pid of another namespace or boot means nothing here
        if parsed.pid == pid:
            # Another token under our pid: a process before us that had the same pid.
            return parsed.token != ours or (owner not in _live and owner not in _behind)
    try:
        os.kill(parsed.pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # exists under another user, or cannot tell: treat as alive
    fields = _stat(parsed.pid)
    if fields is None:
        return False
    if fields[0] == b"Z":
        # A killed child that its parent has not reaped yet still answers kill(pid, 0).
        return True
    # The pid was given to another process since (the owner's start time differs).
    return bool(parsed.started) and _started_of(fields) not in (None, parsed.started)


def _after_fork_in_child() -> None:
    global _state_lock, _process
    _state_lock = threading.Lock()
    _process = None  # named afresh at its first use: the child's pid, token, start
    _live.clear()
    _behind.clear()  # the parent's queued writes are the parent's


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _started_of(fields: list[bytes]) -> str | None:
    # The 22nd field of stat, the 20th after the name: its start, in ticks since boot.
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return fields[19].decode()


def gone_in_words(owner: str) -> str:
    """What became of `owner`, one that `owner_is_dead` found dead, for a message."""
    parsed = _parse(owner)
    with _state_lock:
        pid, ours, _ = _this_process()
    if parsed is not None and parsed.pid == pid and parsed.token == ours:
        return "the call of this process that held it has ended"
    shown = parsed.pid if parsed is not None else owner
    return f"the process that held it (pid {shown} on this host) has exited"
