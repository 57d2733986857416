"""The httpx transports under `Client` and `wrap()`, to put in an httpx client by hand:
``httpx.Client(transport=IdempotentTransport(httpx.HTTPTransport(), store=...))``.

Without `wrap()`'s `send`, the requests an auth flow makes of its own are not told apart
from operations; `wrap()` gives a client both.
"""

from ._transport import AsyncIdempotentTransport, IdempotentTransport

__all__ = ["AsyncIdempotentTransport", "IdempotentTransport"]
