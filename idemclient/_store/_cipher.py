"""Bodies encrypted at rest: the keys an application gives (`BodyEncryption`), and
sealing and opening the values a store writes (`Cipher`).

Request and response bodies hold personal data (names, IBANs, addresses). With
`BodyEncryption`, a store writes them encrypted with AES-256-GCM (from `cryptography`,
the optional extra ``idemclient[crypto]``), and so the values computed from them: the
request's fingerprint and the response's sha256, which in clear would let anyone
holding the file confirm a guessed body (a payment's amount is easy to guess). They
are encrypted rather than replaced by a keyed hash so that rotating the key needs
nothing more than the old key, listed as decrypt-only.

What stays in clear: the method, the URL (already without credentials), the headers
kept (see `_redaction`), the reference, states, statuses, sizes and times.

A sealed value is its own record, so no column changes and no migration is needed:

    MAGIC (6 bytes) | key id (8) | nonce (12) | AES-GCM ciphertext and tag

in the BLOB columns, and ``enc:`` + its URL-safe base64 in the text ones. The key id
names the key without revealing it (an HMAC of a constant under the key), so a row is
opened with the key it was written with, and a missing key is named. The associated
data binds each value to its operation and column: a body moved to another row, or
into another column, does not open. Values written before encryption was switched on
stay readable as they are; encryption never makes a readable row unreadable, and a
value it cannot open is a `StoreError`, never garbage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import StoreCorrupt, StoreError

__all__ = ["INSTALL_CRYPTO", "PLAIN", "BodyEncryption", "Cipher"]

INSTALL_CRYPTO = "pip install 'idemclient[crypto]'"
KEY_BYTES = 32
_MAGIC = b"\x00IDMC\x01"
_KEY_ID_BYTES = 8
_NONCE_BYTES = 12
_HEADER_BYTES = len(_MAGIC) + _KEY_ID_BYTES + _NONCE_BYTES
_TEXT_PREFIX = "enc:"


def _key_bytes(key: object, what: str) -> bytes:
    """A key as bytes: 32 raw bytes, or their URL-safe base64 (as `new_key` makes)."""
    if isinstance(key, str):
        try:
            raw = base64.urlsafe_b64decode(key.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise ValueError(
                f"{what} is not URL-safe base64 of {KEY_BYTES} bytes (make one with"
                " BodyEncryption.new_key())"
            ) from None
    elif isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
    else:
        raise TypeError(f"{what} must be bytes or a base64 str, not {type(key).__name__}")
    if len(raw) != KEY_BYTES:
        # The length only: a key is never shown, not even in part.
        raise ValueError(f"{what} must be {KEY_BYTES} bytes (AES-256), not {len(raw)}")
    return raw


def key_id(key: bytes) -> bytes:
    """A name for `key` that does not reveal it."""
    return hmac.new(key, b"idemclient body key id", hashlib.sha256).digest()[:_KEY_ID_BYTES]


@dataclass(frozen=True, slots=True)
class BodyEncryption:
    """Keys to encrypt stored bodies with (AES-256-GCM), given to a store.

    `key` encrypts every value written from now on and opens those written with it;
    `old_keys` only open values written before a rotation. Each key is 32 random bytes,
    or their URL-safe base64 as `new_key()` makes them (for an environment variable or
    a secrets manager). Keys never appear in a repr, a log or an error.

    To rotate: make a new key, pass it as `key` and the one it replaces in `old_keys`;
    drop an old key only once no operation written with it is left in the store (purge
    them, or wait until they are purged). A value whose key is not given is refused
    with a `StoreError` naming the key's id.
    """

    key: bytes | str = field(repr=False)
    old_keys: Sequence[bytes | str] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.old_keys, str | bytes):
            raise TypeError("old_keys must be a sequence of keys, not one key")
        object.__setattr__(self, "key", _key_bytes(self.key, "key"))
        object.__setattr__(
            self,
            "old_keys",
            tuple(_key_bytes(k, f"old_keys[{n}]") for n, k in enumerate(self.old_keys)),
        )

    @staticmethod
    def new_key() -> str:
        """A new random key, as URL-safe base64 text."""
        return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _aead(key: bytes) -> Any:
    # Imported only now: cryptography is an optional dependency.
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ImportError(
            f"encrypting stored bodies needs the cryptography package, which is not"
            f" installed ({exc}); install it with: {INSTALL_CRYPTO}"
        ) from exc
    return AESGCM(key)


class Cipher:
    """Seals the values a store writes and opens those it reads (see the module
    docstring). Without `BodyEncryption` it writes values as they are, and refuses to
    read a sealed one."""

    def __init__(self, encryption: BodyEncryption | None, where: str) -> None:
        self.where = where
        self.enabled = encryption is not None
        self._writer: tuple[bytes, Any] | None = None
        self._readers: dict[bytes, Any] = {}
        #: the keys, the current one first, for `blind`
        self._keys: tuple[bytes, ...] = ()
        if encryption is not None:
            assert isinstance(encryption.key, bytes)
            self._keys = tuple(
                key for key in (encryption.key, *encryption.old_keys) if isinstance(key, bytes)
            )
            self._writer = (key_id(encryption.key), _aead(encryption.key))
            for key in (encryption.key, *encryption.old_keys):
                assert isinstance(key, bytes)
                self._readers.setdefault(key_id(key), _aead(key))

    def seal(self, value: bytes, *, column: str, operation_id: str) -> bytes:
        if self._writer is None:
            return value
        kid, aead = self._writer
        nonce = os.urandom(_NONCE_BYTES)
        sealed: bytes = aead.encrypt(nonce, value, _associated(column, operation_id))
        return _MAGIC + kid + nonce + sealed

    def open(self, value: bytes, *, column: str, operation_id: str) -> bytes:
        if not value.startswith(_MAGIC):
            return value  # written in clear (before encryption, or without it)
        if len(value) < _HEADER_BYTES:
            raise self._damaged(column, operation_id, "it is truncated")
        kid = value[len(_MAGIC) : len(_MAGIC) + _KEY_ID_BYTES]
        aead = self._readers.get(kid)
        if aead is None:
            if not self.enabled:
                reason = (
                    "is encrypted, and this store was opened without keys: open it with"
                    " encryption=BodyEncryption(key) (the key it was written with)"
                )
            else:
                reason = (
                    "is encrypted with a key that is not among the keys given: add the key"
                    " it was written with to BodyEncryption(old_keys=...)"
                )
            raise StoreError(
                self.where,
                f"operation {operation_id!r}: its {column} {reason} (key id {kid.hex()})",
            )
        from cryptography.exceptions import InvalidTag

        try:
            opened: bytes = aead.decrypt(
                value[len(_MAGIC) + _KEY_ID_BYTES : _HEADER_BYTES],
                value[_HEADER_BYTES:],
                _associated(column, operation_id),
            )
        except InvalidTag:
            raise self._damaged(
                column, operation_id, "it does not open with its key: damaged or altered"
            ) from None
        return opened

    def seal_text(self, value: str, *, column: str, operation_id: str) -> str:
        if self._writer is None:
            return value
        sealed = self.seal(value.encode(), column=column, operation_id=operation_id)
        return _TEXT_PREFIX + base64.urlsafe_b64encode(sealed).decode("ascii")

    def open_text(self, value: str, *, column: str, operation_id: str) -> str:
        if not value.startswith(_TEXT_PREFIX):
            return value
        try:
            sealed = base64.urlsafe_b64decode(value[len(_TEXT_PREFIX) :].encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise self._damaged(column, operation_id, "it is not valid base64") from None
        return self.open(sealed, column=column, operation_id=operation_id).decode()

    def blind(self, digest: str) -> str:
        """A digest kept to be found again by equality (`Store.note_contents`): as it is
        without encryption; with it, a keyed hash under the current key, so that the
        file does not confirm a guessed payment (an amount, an account), as its
        encrypted fingerprint does not."""
        if not self._keys:
            return digest
        return _blinded(self._keys[0], digest)

    def blinds(self, digest: str) -> list[str]:
        """Every way `digest` may have been kept: in clear (before encryption was
        switched on), and under each key given (before a rotation)."""
        return [digest, *(_blinded(key, digest) for key in self._keys)]

    def _damaged(self, column: str, operation_id: str, why: str) -> StoreCorrupt:
        return StoreCorrupt(
            self.where, f"operation {operation_id!r}: its encrypted {column} cannot be read: {why}"
        )


def _blinded(key: bytes, digest: str) -> str:
    return (
        "mac:" + hmac.new(key, b"idemclient content " + digest.encode(), hashlib.sha256).hexdigest()
    )


def _associated(column: str, operation_id: str) -> bytes:
    return f"idemclient/{column}/{operation_id}".encode()


#: The cipher of a store without encryption.
PLAIN = Cipher(None, "")
