"""A loopback port for a server a test starts later, or starts again after a kill.

Asking the kernel for a free port (bind to port 0) and closing it hands back a port
from the ephemeral range, the very range the kernel draws from for every outgoing
connection: between the probe and the server's bind (or between a killed server and
its restart on the same port), any process on the machine that connects anywhere may
be given that port as its own, and the server then cannot listen. On a machine running
several test suites at once that is a failure now and then, never the code's fault.
A port below the ephemeral range is never handed out that way: only a process that
asks for it by number can take it, so the probe below stays true.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: where Linux says its ephemeral range starts; elsewhere, the IANA range's start
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49_152


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and outside the ephemeral range (bounded
    tries); the kernel's choice when that range leaves no room below it."""
    start = _ephemeral_start()
    if start > _LOWEST:
        for _ in range(100):
            port = random.randrange(_LOWEST, start)
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return int(port)
