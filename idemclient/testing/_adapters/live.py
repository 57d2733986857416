"""The reference server on a real loopback socket: in a background thread, or a subprocess.

`serve()` runs uvicorn in a thread of the calling process on 127.0.0.1 and an ephemeral
port, and yields the base URL together with the `ReferenceServer`, so a test can script
faults through Python and still exercise a real TCP connection. `spawn()` starts
`idemclient server` as a child process, for tests of the command itself (signals,
database files) and for clients in other processes.

uvicorn is an optional dependency (`idemclient[server]`), imported only here and only
when a live server is asked for.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._server import ReferenceServer
from .asgi import CONNECTIONS_STATE_KEY, ReferenceApp

__all__ = ["LiveServer", "SpawnedServer", "make_uvicorn_server", "serve", "spawn"]

#: The line `idemclient server` prints once it accepts connections.
READY_LINE = re.compile(r"idemclient reference server listening on (http://\S+)")


def require_uvicorn() -> ModuleType:
    """uvicorn, or an error that says how to get it."""
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - the dev extras always include it
        raise RuntimeError(
            "the live reference server needs uvicorn: pip install 'idemclient[server]'"
        ) from exc
    return uvicorn


@functools.cache
def droppable_protocol() -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, plus a registry of live connections the app can cut.

    Each connection registers its transport under its peer address in the lifespan
    state (which uvicorn shares, by reference, with every request's `scope["state"]`);
    `ReferenceApp` looks the transport up to break a connection without a response.
    h11 is chosen explicitly: it is the pure-Python protocol uvicorn always ships.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DroppableH11Protocol(H11Protocol):
        def _connections(self) -> dict[Any, asyncio.Transport]:
            registry: dict[Any, asyncio.Transport] = self.app_state.setdefault(
                CONNECTIONS_STATE_KEY, {}
            )
            return registry

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn narrows BaseTransport to Transport the same way
            super().connection_made(transport)
            if self.client is not None:
                self._connections()[self.client] = transport

        def connection_lost(self, exc: Exception | None) -> None:
            if self.client is not None:
                self._connections().pop(self.client, None)
            super().connection_lost(exc)

    return DroppableH11Protocol


def make_uvicorn_server(
    app: ReferenceApp, *, log_level: str = "warning", configure_logging: bool = False
) -> Any:
    """A uvicorn `Server` for `app`, with the droppable protocol and no websockets."""
    uvicorn = require_uvicorn()
    config = uvicorn.Config(
        app,
        http=droppable_protocol(),
        ws="none",
        loop="asyncio",
        lifespan="on",
        log_level=log_level,
        # In a test process uvicorn must not reconfigure the application's logging.
        log_config=uvicorn.config.LOGGING_CONFIG if configure_logging else None,
        access_log=log_level in ("debug", "trace", "info"),
        timeout_graceful_shutdown=5,
        # The reference server sends its own Date, from its clock (which a test may
        # move): uvicorn's, from the host's, would be a second one.
        date_header=False,
    )
    return uvicorn.Server(config)


def bind(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket; port 0 picks a free one.

    The protocol is named explicitly (IPPROTO_TCP, not 0): asyncio disables Nagle's
    algorithm only on sockets that say they are TCP, and uvicorn writes a response's
    head and body separately. Without it every keep-alive response waits ~40 ms for
    the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def url_for(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass(frozen=True, slots=True)
class LiveServer:
    """A reference server answering on a real socket in this process."""

    #: base URL, e.g. http://127.0.0.1:53121
    url: str
    #: the server itself: script faults and read the ledger directly
    server: ReferenceServer


@contextmanager
def serve(
    server: ReferenceServer | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    recovery_interval: float | None = None,
    webhook_interval: float | None = None,
    ready_timeout: float = 10.0,
) -> Iterator[LiveServer]:
    """Run `server` (a fresh in-memory one by default) under uvicorn in a thread.

    `webhook_interval` runs the webhook delivery loop in the background (off by
    default: tests call `deliver_webhooks`). Yields once the server accepts
    connections; on exit it shuts uvicorn down (and closes the server if this call
    created it).
    """
    own = server is None
    live_server = server if server is not None else ReferenceServer()
    ready = threading.Event()
    app = ReferenceApp(
        live_server,
        recovery_interval=recovery_interval,
        webhook_interval=webhook_interval,
        on_ready=ready.set,
    )
    uv = make_uvicorn_server(app)
    sock = bind(host, port)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            uv.run(sockets=[sock])
        except BaseException as exc:  # reported to the caller, not lost in the thread
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name="idemclient-reference-server", daemon=True)
    try:
        thread.start()
        if not ready.wait(ready_timeout) or failure:
            raise RuntimeError("the reference server did not start") from (
                failure[0] if failure else None
            )
        yield LiveServer(url=url_for(sock), server=live_server)
    finally:
        uv.should_exit = True
        thread.join(timeout=30)
        sock.close()
        if own:
            live_server.close()


@dataclass(frozen=True, slots=True)
class SpawnedServer:
    """`idemclient server` running as a child process."""

    url: str
    process: subprocess.Popen[str]


def server_command(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    db: str | os.PathLike[str] | None = None,
    lease: float | None = None,
    key_ttl: float | None = None,
    recovery_interval: float | None = None,
    log_level: str = "warning",
    profile: str | None = None,
) -> list[str]:
    """The argv that starts the reference server with these settings."""
    argv = [sys.executable, "-m", "idemclient.testing", "--host", host, "--port", str(port)]
    for flag, value in (
        ("--db", db),
        ("--lease", lease),
        ("--key-ttl", key_ttl),
        ("--recovery-interval", recovery_interval),
        ("--profile", profile),
    ):
        if value is not None:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return [*argv, "--log-level", log_level]


def _read_ready_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            line = process.stdout.readline()
            if not line:
                break  # the process exited before it was ready
            match = READY_LINE.search(line)
            if match:
                return match.group(1)
    raise RuntimeError(f"idemclient server did not report ready within {timeout} s")


@contextmanager
def spawn(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    db: str | os.PathLike[str] | None = None,
    lease: float | None = None,
    key_ttl: float | None = None,
    recovery_interval: float | None = None,
    ready_timeout: float = 20.0,
    profile: str | None = None,
) -> Iterator[SpawnedServer]:
    """Start `idemclient server` as a child process and yield once it is ready.

    `profile` is a built-in server profile's name (`--profile`).

    On exit the process gets SIGTERM (its clean shutdown path) and, should it hang,
    SIGKILL.
    """
    argv = server_command(
        host=host,
        port=port,
        db=db,
        lease=lease,
        key_ttl=key_ttl,
        recovery_interval=recovery_interval,
        profile=profile,
    )
    process = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = _read_ready_line(process, ready_timeout)
        yield SpawnedServer(url=url, process=process)
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        except ValueError:
            pass  # the caller already collected the output and closed the pipes
