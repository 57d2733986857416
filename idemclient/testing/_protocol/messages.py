"""The values that cross the boundary between the protocol core and its adapters.

The core never sees a socket or an httpx object: an adapter (the in-process transport,
the respx side effect, the ASGI app) turns what it received into a `ServerRequest`,
hands it to the core, and turns the answer back into its own world. The answer is
either a `ServerResponse` to send, or `DropConnection`: break the connection and send
nothing, the way a crashed worker or a cut network cable would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["DropConnection", "ServerRequest", "ServerResponse", "json_bytes"]


# One encoder, built once: `json.dumps` with these options would build a new one for
# every call, which is a good part of what a replay costs.
_CANONICAL = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def json_bytes(value: Any) -> bytes:
    """Compact, key-sorted JSON: the same value always gives the same bytes."""
    return _CANONICAL.encode(value).encode()


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """One HTTP request as the core sees it. Header names are lower-case."""

    method: str
    path: str
    query: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    @classmethod
    def build(
        cls,
        method: str,
        path: str,
        *,
        query: str = "",
        headers: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
        body: bytes = b"",
    ) -> ServerRequest:
        """Build a request, lower-casing header names."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        return cls(
            method=method.upper(),
            path=path,
            query=query,
            headers=tuple((name.lower(), value) for name, value in pairs),
            body=body,
        )

    def header_values(self, name: str) -> list[str]:
        """Every value of header `name` (lower-case), in the order received."""
        return [value for key, value in self.headers if key == name]

    def header(self, name: str) -> str | None:
        """The first value of header `name` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def query_params(self) -> dict[str, str]:
        """The query string as a dict; a repeated name keeps its last value."""
        return dict(parse_qsl(self.query, keep_blank_values=True))


@dataclass(frozen=True, slots=True)
class ServerResponse:
    """An answer to send.

    `delay` is how long the server takes before the answer leaves it, after all work
    is committed: the in-process transport compares it with the client's read timeout,
    the ASGI app really waits.
    """

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay: float = 0.0

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class DropConnection:
    """Break the connection without sending a response. `reason` is for logs and tests."""

    reason: str
