"""A reference server process whose next call to an external system is held at a gate.

    python gated_server.py DB PORT SYSTEM

Serves on 127.0.0.1:PORT from the SQLite file DB, with no background recovery worker,
prints "ready", then "held" once a request has committed EXTn_SENT and is waiting on
external system SYSTEM (none when SYSTEM is 0), and then waits to be killed: the test
SIGKILLs it with the request in the middle of that call.
"""

from __future__ import annotations

import sys
import threading

from idemclient.clock import SystemClock
from idemclient.testing import ReferenceServer, serve


def main(db: str, port: int, system: int) -> None:
    with ReferenceServer(db=db, clock=SystemClock()) as server:
        gate = server.hold_external(system, timeout=120) if system else None
        with serve(server, port=port):
            print("ready", flush=True)
            if gate is not None and gate.wait_until_reached(timeout=120):
                print("held", flush=True)
            threading.Event().wait(120)  # until the test kills this process


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
