"""A request's facts, each read once through httpx: its headers as the intent takes
them (`read_headers`), and the profile's facts and the origin of its method and URL
(`Frame`, kept by `Frames`).

httpx decodes every header again on each read (`get_list`, `multi_items`, `in`), and
works out a URL's parts again on each property; a request is asked the same things by
the exchange, the route, the call and its intent. What they ask is read here once.
"""

from __future__ import annotations

import httpx

from ._profile import Resolved

__all__ = ["Frame", "Frames", "Origin", "Pairs", "origin_of", "read_headers", "values_of"]

#: A request's headers: (name lowercased, value) pairs, in the order they were given.
Pairs = list[tuple[str, str]]
#: Scheme, host and port: what the servers' times and a redirect's bounds are kept by.
Origin = tuple[bytes, bytes, int | None]


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


def origin_of(url: httpx.URL) -> Origin:
    """`url`'s scheme, host and port (see `Origin`)."""
    return (url.raw_scheme, url.raw_host, url.port)


class Frame:
    """What one request's method and URL say: the profile's facts for them (`resolved`,
    see `Settings.resolve_url`) and the origin."""

    __slots__ = ("method", "origin", "resolved", "url")

    def __init__(self, url: httpx.URL, method: str, resolved: Resolved) -> None:
        self.url = url
        self.method = method
        self.resolved = resolved
        self.origin = origin_of(url)


class Frames:
    """The `Frame` of each request, by its URL object and method: asked of one request
    by the exchange as it begins, the route in the transport, the call, and each answer
    (its origin's time), found once. An `httpx.URL` never changes, so the same URL
    object is the same URL; a request given another URL or method (by a hook, an auth
    flow) is another frame. Safe between threads: each request has its own entry, an
    entry holds its URL (so that its id is no other URL's while it is kept), and the
    table is emptied when full (a frame lost so is only found again)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[int, Frame] = {}

    def get(self, url: httpx.URL, method: str) -> Frame | None:
        """The frame kept for `url` (this very object) and `method`, if any."""
        found = self._kept.get(id(url))
        if found is not None and found.url is url and found.method == method:
            return found
        return None

    def origin(self, url: httpx.URL) -> Origin:
        """`origin_of(url)`, as a frame kept for it found it."""
        found = self._kept.get(id(url))
        return found.origin if found is not None and found.url is url else origin_of(url)

    def keep(self, frame: Frame) -> Frame:
        kept = self._kept
        if len(kept) >= _FRAMES_KEPT:
            kept.clear()
        kept[id(frame.url)] = frame
        return frame


#: How many frames a `Frames` keeps at most: more than the requests a client runs at once.
_FRAMES_KEPT = 256
