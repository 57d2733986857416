"""What a store written by an earlier version holds that this one never writes, taken
out when the store is migrated.

Versions before the header allow list wrote every request header but a fixed few
(`X-Auth-Token`, `Api-Key` went in with their values), secret query values in the URL,
and answers' secret headers; they also deleted finished operations after a week, so
those values went with them. This version keeps operations until an operator purges
them, so the migration that makes the store this version's also takes those values out:
a secret-looking request header keeps its name as withheld (a resume must carry it
again, as for any operation written now), an answer's secret header goes, and a URL
keeps each secret query parameter's name only. A URL that changes is fingerprinted
again over its stored body, as an operation written now would be.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from .._fingerprint import bytes_fingerprint
from .._redaction import DEFAULT_SECRET_HEADERS, looks_secret, redact_location, redact_url

__all__ = ["scrubbed"]


def _secret(name: str) -> bool:
    return looks_secret(name) or name.lower() in DEFAULT_SECRET_HEADERS


def _pairs(value: Any) -> list[list[Any]]:
    if value is None or value == "":
        return []
    pairs = json.loads(value) if isinstance(value, str | bytes) else value
    return [list(pair) for pair in pairs]


def scrubbed(
    method: str, url: str, headers: Any, body: bytes, fingerprint_: str, response_headers: Any
) -> tuple[str, str, str, str | None] | None:
    """The row's (url, headers, fingerprint, response headers) with no secret left, as
    stored (JSON text), or None when it holds none."""
    request = _pairs(headers)
    answer = _pairs(response_headers)
    kept_request = [
        [name, None] if value is not None and _secret(str(name)) else [name, value]
        for name, value in request
    ]
    kept_answer = [
        [name, redact_location(value) if str(name).lower() in _URL_HEADERS else value]
        for name, value in answer
        if not _secret(str(name))
    ]
    redacted = str(redact_url(httpx.URL(url)))
    if not _plain(fingerprint_):  # sealed, or by meaning: written since, nothing to take out
        return None
    if kept_request == request and kept_answer == answer and redacted == url:
        return None
    new_fingerprint = (
        # by the rule the row was written with, over its bytes
        bytes_fingerprint(method, httpx.URL(redacted), body) if redacted != url else fingerprint_
    )
    return (
        redacted,
        _dump(kept_request),
        new_fingerprint,
        None if response_headers is None else _dump(kept_answer),
    )


_URL_HEADERS = frozenset({"location", "content-location"})


def _plain(value: str) -> bool:
    """A fingerprint as earlier versions wrote it: 64 hex digits, not a sealed value."""
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _dump(pairs: Sequence[Sequence[Any]]) -> str:
    return json.dumps([list(pair) for pair in pairs], separators=(",", ":"))
