"""Reading a server's "not before": `retry-after-ms`, and `Retry-After` as seconds or as
an HTTP-date.

Anything unusable (garbage, negative, NaN, infinite, a date in the past) means "the
server gave no usable wait" and the caller falls back to its own backoff. Huge values
are clamped so that no later arithmetic overflows; the policy then decides whether the
wait fits the deadline at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["MAX_SERVER_WAIT", "parse_retry_after"]

#: A ceiling on any server wait we represent: one year. Values above it are clamped to
#: it, which is far beyond any deadline and still safe to add to a timestamp.
MAX_SERVER_WAIT = 365 * 24 * 3600.0

_DECIMAL = frozenset("0123456789.")


def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asked us to wait, or None when it gave no usable value.

    `headers` must look names up case-insensitively (as `httpx.Headers` does); `now` is
    the wall-clock time used to turn an HTTP-date into a wait. `retry-after-ms` wins
    over `Retry-After` when both are present and usable: it is the more precise.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _number(millis)
        if seconds is not None:
            return min(seconds / 1000.0, MAX_SERVER_WAIT)
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return min(seconds, MAX_SERVER_WAIT)
    return _http_date_wait(value, now)


def _number(text: str) -> float | None:
    text = text.strip()
    # Only plain decimal notation: float() would also accept "nan", "inf", "1e20" and
    # "1_000", none of which a server means as a number of seconds.
    if not text or text.count(".") > 1 or not all(c in _DECIMAL for c in text) or text == ".":
        return None
    seconds = float(text)  # cannot raise on digits and one dot; may be inf when huge
    return MAX_SERVER_WAIT if math.isinf(seconds) else seconds


def _http_date_wait(text: str, now: float) -> float | None:
    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime and "-0000" forms carry no zone; HTTP-dates are GMT
        when = when.replace(tzinfo=UTC)
    try:
        wait = when.timestamp() - now
    except (OverflowError, OSError, ValueError):
        return None
    if not math.isfinite(wait) or wait <= 0:
        return None  # a date in the past is no instruction to wait
    return min(wait, MAX_SERVER_WAIT)
