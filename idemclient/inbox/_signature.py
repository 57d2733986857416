"""Webhook signatures: the header format, signing, parsing and verifying.

A sender signs each delivery with every secret it currently holds (several during a
rotation) and sends::

    Idemclient-Message-Id: evt_3f0c9a...
    Idemclient-Signature: t=1700000000,v1=5257a869...,v1=9c1e44b0...

Each `v1` is the lower-case hex HMAC-SHA256, under one secret, of::

    <t> "." <message id> "." <body bytes>

The message id is inside the signed text because deduplication trusts it: were it left
out, anyone holding one captured delivery could replay its body under fresh ids within
the tolerance and have it applied again.

Verification fails closed. Every problem raises `SignatureInvalid`; there is no
"unsigned" or "unknown scheme" path that lets a message through. Items of other
schemes (`v0=`, `v2=`) are ignored, so a sender may add a newer scheme beside `v1`, but
at least one `v1` must match. The authenticity check comes before the timestamp check,
so "stale" is only ever said of a message that really was signed by the sender.
Comparisons use `hmac.compare_digest` against every candidate, whether or not an
earlier one matched.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .._errors import SignatureInvalid

__all__ = [
    "DEFAULT_TOLERANCE",
    "MESSAGE_ID_HEADER",
    "MIN_SECRET_BYTES",
    "SIGNATURE_HEADER",
    "ParsedSignature",
    "check_age",
    "check_tolerance",
    "check_undotted",
    "compute_signature",
    "parse_signature",
    "secret_bytes",
    "sign",
    "verify_signature",
]

SIGNATURE_HEADER = "Idemclient-Signature"
MESSAGE_ID_HEADER = "Idemclient-Message-Id"
#: How far a signature's timestamp may be from the receiver's clock, either way.
DEFAULT_TOLERANCE = 300.0
#: Shorter secrets are refused: a short shared secret can be guessed offline from one
#: captured delivery.
MIN_SECRET_BYTES = 16
# Bounds on what a parser will look at, so a hostile header costs little to refuse.
_MAX_HEADER_LENGTH = 4096
_MAX_SIGNATURES = 16
_MAX_TIMESTAMP_DIGITS = 12  # up to the year 33658; longer is an attack or a bug
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class ParsedSignature:
    """The parts of a signature header: its timestamp and its `v1` signatures."""

    timestamp: int
    v1: tuple[str, ...]


def secret_bytes(secret: str | bytes) -> bytes:
    """A secret as the bytes HMAC uses (UTF-8 for text), refused if too short."""
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(raw) < MIN_SECRET_BYTES:
        raise ValueError(
            f"a webhook secret must be at least {MIN_SECRET_BYTES} bytes long, not {len(raw)}"
        )
    return raw


def check_undotted(message_id: str) -> str:
    """`message_id`, refused if it contains a ``.``: the separator of the signed text.

    With a dot in the id, ``t.id.body`` could be regrouped: a delivery signed for id
    ``evt.2024.0001`` would verify again as id ``evt.2024`` with body ``0001.{...}``, a
    fresh id under the same signature, and be applied again. Without one (and with a
    timestamp of digits), the first two dots of the signed text are its separators.
    """
    if "." in message_id:
        raise ValueError(
            f"message id {message_id!r} contains '.', the separator of the signed text: a"
            " signature over it could be replayed under another id"
        )
    return message_id


def compute_signature(secret: bytes, *, timestamp: int, message_id: str, body: bytes) -> str:
    """The `v1` signature: hex HMAC-SHA256 of ``t.message_id.body`` under `secret`."""
    check_undotted(message_id)
    signed = b"%d.%s." % (timestamp, message_id.encode()) + body
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def sign(secrets: Iterable[str | bytes], *, timestamp: int, message_id: str, body: bytes) -> str:
    """The `Idemclient-Signature` value for one delivery, signed with each secret."""
    keys = [secret_bytes(s) for s in secrets]
    if not keys:
        raise ValueError("signing needs at least one secret")
    parts = [f"t={int(timestamp)}"]
    parts += [
        f"v1={compute_signature(k, timestamp=timestamp, message_id=message_id, body=body)}"
        for k in keys
    ]
    return ",".join(parts)


def _malformed(detail: str) -> SignatureInvalid:
    return SignatureInvalid("malformed", detail)


def parse_signature(value: str | None) -> ParsedSignature:
    """Split a signature header into its timestamp and `v1` signatures.

    Strict about what it needs (one `t` of decimal digits, at least one `v1` of 64 hex
    digits, items `name=value` separated by commas, spaces around items allowed),
    tolerant only of items of other schemes, which it skips. Raises `SignatureInvalid`
    ("missing" or "malformed") for anything else.
    """
    if value is None or not value.strip():
        raise SignatureInvalid("missing", f"no {SIGNATURE_HEADER} header")
    if len(value) > _MAX_HEADER_LENGTH:
        raise _malformed(f"the header is longer than {_MAX_HEADER_LENGTH} characters")
    timestamp: int | None = None
    v1: list[str] = []
    for item in value.split(","):
        name, eq, content = item.strip(" \t").partition("=")
        if not eq or not name:
            raise _malformed(f"{item.strip()!r} is not a name=value item")
        if name == "t":
            if timestamp is not None:
                raise _malformed("more than one timestamp (t=)")
            # str.isdigit accepts other scripts' digits; only ASCII 0-9 is a timestamp.
            if not (content.isascii() and content.isdigit()):
                raise _malformed(f"the timestamp {content!r} is not a whole number of seconds")
            if len(content) > _MAX_TIMESTAMP_DIGITS:
                raise _malformed("the timestamp has too many digits")
            timestamp = int(content)
        elif name == "v1":
            digest = content.lower()
            if len(digest) != 64 or not set(digest) <= _HEX:
                raise _malformed("a v1 signature is 64 hexadecimal digits")
            v1.append(digest)
            if len(v1) > _MAX_SIGNATURES:
                raise _malformed(f"more than {_MAX_SIGNATURES} signatures")
    if timestamp is None:
        raise _malformed("no timestamp (t=)")
    if not v1:
        raise _malformed("no v1 signature")
    return ParsedSignature(timestamp, tuple(v1))


def verify_signature(
    header: str | None,
    *,
    secrets: Sequence[str | bytes],
    message_id: str,
    body: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> int:
    """Check that `header` signs (`message_id`, `body`) with one of `secrets`, recently.

    Returns the signed timestamp. Raises `SignatureInvalid` otherwise; the caller must
    not look at the body before this returns.
    """
    if not secrets:
        # Fail closed on configuration too: no secret must never mean "accept all".
        raise SignatureInvalid("mismatch", "no secret is configured", message_id=message_id)
    check_tolerance(tolerance)
    keys = [secret_bytes(s) for s in secrets]
    try:
        parsed = parse_signature(header)
    except SignatureInvalid as exc:
        raise SignatureInvalid(exc.reason, exc.detail, message_id=message_id) from None
    matched = False
    for secret in keys:
        expected = compute_signature(
            secret, timestamp=parsed.timestamp, message_id=message_id, body=body
        )
        for candidate in parsed.v1:
            # Every pair is compared, and with a constant-time compare, so the time
            # taken says nothing about how much of a forged signature was right.
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise SignatureInvalid(
            "mismatch",
            "no signature matches a secret we hold (forged, tampered, or an unknown secret)",
            message_id=message_id,
        )
    check_age(parsed.timestamp, now=now, tolerance=tolerance, message_id=message_id)
    return parsed.timestamp


def check_tolerance(tolerance: float) -> None:
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"the tolerance must be a positive number of seconds, not {tolerance!r}")


def check_age(timestamp: int, *, now: float, tolerance: float, message_id: str | None) -> None:
    """Refuse a signature made more than `tolerance` seconds from `now`, either way."""
    age = now - timestamp
    if age > tolerance:
        raise SignatureInvalid(
            "stale",
            f"signed {age:.0f} s ago; older than the tolerance of {tolerance:.0f} s",
            message_id=message_id,
        )
    if -age > tolerance:
        raise SignatureInvalid(
            "future",
            f"signed {-age:.0f} s in the future; beyond the tolerance of {tolerance:.0f} s"
            " (check the clocks)",
            message_id=message_id,
        )
