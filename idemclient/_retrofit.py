"""The one place idemclient touches httpx's private attributes: the transports of a
client that is already built, which `wrap()` replaces, and the body of a request that
the transport sends as its operation was recorded.

Why it is needed: `wrap(client, store=...)` gives safe retries to an httpx client the
caller has already configured (auth, headers, limits, proxies, TLS, mounts, event
hooks), and keeps all of it. httpx fixes a client's transports when the client is built
and has no public way to replace them, and rebuilding the client would drop what the
caller configured. So the transports are swapped where httpx keeps them:

- `_transport`: the default transport;
- `_mounts`: URL pattern -> transport, where None means "the default transport" (how
  httpx records a `NO_PROXY` entry).

And one request's body, which the transport replaces (`replace_body`) when it sends an
operation issued again with the bytes it was recorded with:

- `_content`: the body of a request whose body httpx holds in memory, which `content`
  and `read()` give (an inner transport such as `MockTransport` reads it there, others
  read `stream`); setting only `stream` would leave the two saying different things.

All are the same in every httpx release that pyproject.toml allows (0.27 and 0.28).
`make httpx-releases` (part of `make test`) runs the tests of `wrap()` and of this
module against each of those releases; a release that moves these attributes fails
there, and the pin moves only once this module follows. Everything else `wrap()` does
goes through httpx's public interface (the client's own `send`, see `_exchange`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import httpx

__all__ = ["replace_body", "replace_transports", "transport_of"]


Transport = httpx.BaseTransport | httpx.AsyncBaseTransport


def _checked(client: httpx.Client | httpx.AsyncClient) -> tuple[Transport, dict[Any, Any]]:
    """The client's default transport and its mounts, as this httpx keeps them."""
    if not isinstance(client, httpx.Client | httpx.AsyncClient):
        raise TypeError(
            f"expected an httpx.Client or httpx.AsyncClient, got {type(client).__module__}."
            f"{type(client).__qualname__}: an idemclient Client or AsyncClient has its"
            " own resume() and send_pending(); wrap() and resume() take httpx clients"
        )
    transport: Transport | None = getattr(client, "_transport", None)
    mounts: object = getattr(client, "_mounts", None)
    if transport is None or not isinstance(mounts, dict):
        raise RuntimeError(
            f"idemclient cannot find the transports of this {type(client).__name__}: an"
            " httpx.Client or httpx.AsyncClient of httpx 0.27 or 0.28 keeps them in"
            f" `_transport` and `_mounts`, and this is httpx {httpx.__version__}. Use an"
            " httpx release that idemclient supports (see its pyproject.toml)."
        )
    return transport, mounts


def transport_of(client: httpx.Client | httpx.AsyncClient) -> Transport:
    """The client's default transport (the one a request goes to when no mount matches)."""
    return _checked(client)[0]


@overload
def replace_transports(
    client: httpx.Client, replace: Callable[[httpx.BaseTransport], httpx.BaseTransport]
) -> None: ...


@overload
def replace_transports(
    client: httpx.AsyncClient,
    replace: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport],
) -> None: ...


def replace_transports(
    client: httpx.Client | httpx.AsyncClient, replace: Callable[[Any], Any]
) -> None:
    """Put `replace(transport)` in place of the client's default transport and of every
    mounted one. A mount of None stays None: it still means the default transport, which
    is now the replaced one. Nothing is changed when the check of the client fails."""
    transport, mounts = _checked(client)
    replaced_mounts = {
        pattern: None if mounted is None else replace(mounted)
        for pattern, mounted in mounts.items()
    }
    replaced = replace(transport)
    client._transport = replaced
    client._mounts = replaced_mounts


def replace_body(request: httpx.Request, body: bytes) -> None:
    """Make `body` the request's body, as its stream and as its content alike (its
    headers are the caller's to set)."""
    request.stream = httpx.ByteStream(body)
    request._content = body
