"""Shared helpers for the reference-server tests (tests/server and tests/server_postgres)."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

from idemclient.testing import ReferenceServer

BODY: dict[str, Any] = {"amount": 1250, "currency": "EUR", "reference": "inv-1"}


@dataclass
class Env:
    """One server under test, reachable in-process or over a socket."""

    name: str
    server: ReferenceServer
    #: faults, clock and inspection: the server itself, or a SandboxClient over HTTP
    control: Any
    base_url: str
    transport: httpx.BaseTransport | None
    stack: ExitStack = field(default_factory=ExitStack)
    _clients: dict[str | None, httpx.Client] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.name == "live"

    def client(self, token: str | None = "alice", **kwargs: Any) -> httpx.Client:
        """A client authenticated as `token`; plain ones are reused within the test."""
        if not kwargs and token in self._clients:
            return self._clients[token]
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        # verify=False: plain HTTP on loopback, so skip loading a CA bundle per client.
        client = httpx.Client(
            base_url=self.base_url,
            transport=self.transport,
            headers=headers,
            verify=False,
            **kwargs,
        )
        self.stack.enter_context(client)
        if not kwargs:
            self._clients[token] = client
        return client

    def post(
        self,
        key: str | None,
        body: Any = None,
        *,
        path: str = "/v1/payments",
        token: str | None = "alice",
        **kwargs: Any,
    ) -> httpx.Response:
        headers = {} if key is None else {"Idempotency-Key": key}
        payload = BODY if body is None else body
        return self.client(token).post(path, json=payload, headers=headers, **kwargs)


class WebhookCatcher:
    """A webhook endpoint on 127.0.0.1 that answers 200 and notes that something came.

    How a test waits for work a server in another process finishes in its own time:
    a finished payment queues a webhook event in the transaction that finishes it, so
    an event arriving here means the payment is final. `arrived.wait(timeout)` blocks
    on that event, bounded, instead of polling the server.
    """

    def __init__(self) -> None:
        self.arrived = threading.Event()
        arrived = self.arrived

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
                arrived.set()

            def log_message(self, format: str, *args: object) -> None:
                pass  # a test's output is for failures, not for access logs

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.url = f"http://127.0.0.1:{self._httpd.server_port}/webhooks"

    def __enter__(self) -> WebhookCatcher:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._thread.join(timeout=10)
        self._httpd.server_close()
