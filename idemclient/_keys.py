"""Idempotency keys: new ones, natural ones, derived ones, and what a valid key is.

A key is made once per logical operation, before the first attempt, and never inside
the retry loop.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from ._errors import InvalidKey

__all__ = [
    "DEFAULT_NAMESPACE",
    "derive_key",
    "key_from_identity",
    "new_key",
    "one_key",
    "validate_key",
]

#: The namespace of natural keys when the caller names none. Fixed forever: changing it
#: would give every resubmitted file new keys, and so a second payment per row.
DEFAULT_NAMESPACE = uuid.UUID("6f1c1e4a-3b0d-5c8e-9a71-2f4d8b6e0c15")

MAX_KEY_LENGTH = 255
_KEY_RE = re.compile(r"[A-Za-z0-9\-_.:~]{1,255}")
_SEPARATOR = "\x1f"  # unit separator: cannot occur in a caller's printable identity parts


def new_key() -> str:
    """A fresh UUIDv7 (RFC 9562): random, and time-ordered for the server's index
    locality, made by uuid6 (the chosen library for it)."""
    # Imported at the first key, not with idemclient: uuid6 reads its own version from
    # the installed metadata when imported, which costs more than the rest of this module.
    import uuid6

    return str(uuid6.uuid7())


def key_from_identity(*parts: str, namespace: uuid.UUID = DEFAULT_NAMESPACE) -> str:
    """A deterministic key (uuid5) from a natural identity.

    `parts` are the pieces of the identity, for example a payout's reference (within
    its scope) and the operation; never a field of the content, such as an amount or a
    value date, which belongs in what the server compares, not in who the operation
    is. The same parts give the same key on any machine with no stored state. The
    parts are joined unambiguously: ("a:b", "c") and ("a", "b:c") give different keys.
    """
    if not parts:
        raise ValueError("key_from_identity needs at least one part of the identity")
    for part in parts:
        if not isinstance(part, str) or not part:
            raise ValueError(f"identity parts must be non-empty strings, got {part!r}")
        if _SEPARATOR in part:
            raise ValueError(f"identity part {part!r} contains a control character")
    return str(uuid.uuid5(namespace, _SEPARATOR.join(parts)))


def derive_key(parent: str, step: str) -> str:
    """A sub-key for one step of multi-step work, deterministic from the parent key.

    Resumed work presents the same sub-key the first attempt used, so the downstream
    system treats it as a replay rather than a second instruction.
    """
    validate_key(parent)
    if not step:
        raise ValueError("derive_key needs a non-empty step name")
    return str(uuid.uuid5(DEFAULT_NAMESPACE, f"{parent}{_SEPARATOR}{step}"))


def validate_key(key: object) -> str:
    """Return `key` if it is 1..255 characters of ``A-Z a-z 0-9 - _ . : ~``.

    Raises `InvalidKey` (a `ValueError`) naming what is wrong otherwise.
    """
    if not isinstance(key, str):
        raise InvalidKey(key, f"must be a string, not {type(key).__name__}")
    if not key:
        raise InvalidKey(key, "must not be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(key, f"is {len(key)} characters long; at most {MAX_KEY_LENGTH} allowed")
    if _KEY_RE.fullmatch(key) is None:
        bad = next(c for c in key if _KEY_RE.fullmatch(c) is None)
        raise InvalidKey(key, f"contains {bad!r}; only A-Z a-z 0-9 - _ . : ~ are allowed")
    return key


def one_key(given: Iterable[tuple[str, str]]) -> str | None:
    """The one key of a request, from every place it was given: (where, key) pairs, such
    as ("key=", "k3") and ("the Idempotency-Key header", "k3"). None if it was given
    nowhere. Two that differ are two keys for one request, which no server reads as
    the caller meant: `InvalidKey`, naming both places and both values, raised before
    anything is recorded or sent. The same key given twice is one key."""
    first: tuple[str, str] | None = None
    for where, key in given:
        if first is None:
            first = (where, key)
        elif key != first[1]:
            there, known = first
            both = (
                f"{where} is given twice, as {known!r} and {key!r}"
                if where == there
                else f"{there} gives {known!r} and {where} gives {key!r}"
            )
            raise InvalidKey(
                key,
                f"two different keys for one request: {both}. Give the key once (the same"
                " key given both ways is fine); nothing was recorded or sent",
            )
    return None if first is None else first[1]
