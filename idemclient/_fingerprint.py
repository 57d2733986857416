"""What makes two requests the same operation, as one hash."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import httpx

__all__ = ["fingerprint", "fingerprints"]


def fingerprint(method: str, url: httpx.URL, body: bytes) -> str:
    """sha256 over method, path and query, and body, each length-prefixed.

    `url` is the request's URL as stored (see `_redaction.redact_url`), so a credential
    rotating in the query is the same operation. The origin (scheme, host, port) is left
    out of the hash: an operation is bound to its origin by a check of its own, which
    can say so by name (see `_store._rows.mismatch`).
    """
    # `fingerprints` spelled out for one body: made for every operation.
    digest = hashlib.sha256()
    for part in (method.encode(), url.raw_path, body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def fingerprints(method: str, url: httpx.URL) -> Callable[[bytes], str]:
    """`fingerprint` of many bodies sent with one method to one URL: the method and the
    URL are hashed once."""
    start = hashlib.sha256()
    for part in (method.encode(), url.raw_path):
        start.update(len(part).to_bytes(8, "big"))
        start.update(part)

    def of(body: bytes) -> str:
        digest = start.copy()
        digest.update(len(body).to_bytes(8, "big"))
        digest.update(body)
        return digest.hexdigest()

    return of
