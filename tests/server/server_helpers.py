"""Shared helpers for the reference-server tests (imported by name: tests/server is on
sys.path while these tests run, as pytest's default import mode puts it there)."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
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
