"""A request's facts, each read once through httpx: its headers as the intent takes
them (`read_headers`).

httpx decodes every header again on each read (`get_list`, `multi_items`, `in`), and
works out a URL's parts again on each property; a request is asked the same things by
the exchange, the route, the call and its intent. What they ask is read here once.
"""

from __future__ import annotations

import httpx

__all__ = ["Pairs", "read_headers", "values_of"]

#: A request's headers: (name lowercased, value) pairs, in the order they were given.
Pairs = list[tuple[str, str]]


def read_headers(headers: httpx.Headers) -> Pairs:
    """`headers` as `httpx.Headers.multi_items()` gives them (names lowercased, values
    decoded as httpx decodes them), read in one pass: ASCII, as httpx decodes headers
    that are all ASCII; httpx's own reading otherwise."""
    try:
        return [(key.decode("ascii").lower(), value.decode("ascii")) for key, value in headers.raw]
    except UnicodeDecodeError:
        return headers.multi_items()


def values_of(pairs: Pairs, name: str) -> list[str]:
    """Every value of the header `name` (lower case) among `pairs`, in order."""
    return [value for given, value in pairs if given == name]
