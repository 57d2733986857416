"""Idempotency keys: new ones, natural ones, derived ones, and what a valid key is.

`new_key` and `key_from_identity` are also importable from `idemclient` itself; a
key outside the rules raises `idemclient.errors.InvalidKey`.
"""

from ._keys import DEFAULT_NAMESPACE, derive_key, key_from_identity, new_key, validate_key

__all__ = [
    "DEFAULT_NAMESPACE",
    "derive_key",
    "key_from_identity",
    "new_key",
    "validate_key",
]
