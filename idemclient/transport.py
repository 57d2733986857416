"""The httpx transports under `Client` and `wrap()`, for building an httpx client by hand:
``httpx.Client(transport=IdempotentTransport(httpx.HTTPTransport(), store=...))``."""

from ._transport import AsyncIdempotentTransport, IdempotentTransport

__all__ = ["AsyncIdempotentTransport", "IdempotentTransport"]
