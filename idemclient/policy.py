"""When to retry: the `RetryPolicy`, the `RetryBudget` shared by a client's calls, and
the parser of a server's `Retry-After`.

`RetryPolicy` is also importable from `idemclient` itself.
"""

from ._budget import RetryBudget
from ._policy import RetryPolicy
from ._retry_after import parse_retry_after

__all__ = ["RetryBudget", "RetryPolicy", "parse_retry_after"]
