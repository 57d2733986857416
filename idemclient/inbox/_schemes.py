"""Signature schemes: how a delivery proves who sent it, and which message it is.

A receiver is given one scheme (`WebhookReceiver(..., scheme=...)`); each reads its own
headers, checks the signature against every secret it holds (several during a
rotation), and returns the message id and the signed timestamp. Three are known:

- `StandardWebhooks(secrets)`, the default, as the Standard Webhooks specification
  defines it: headers ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``;
  the signature is ``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``
  under the secret, several separated by spaces; a secret is ``whsec_`` and the key in
  base64. The reference server signs its deliveries this way. Svix-based senders sign
  the same way under ``svix-id``, ``svix-timestamp`` and ``svix-signature``, which are
  read as the same headers (svix's own verifier takes either spelling).
- `StripeSignature(secret)`, for Stripe's webhooks: ``Stripe-Signature:
  t=<unix>,v1=<hex>`` where each ``v1`` is the hex HMAC-SHA256 of ``{t}.{body}`` under
  the endpoint's secret, its ``whsec_...`` text taken as it is (UTF-8), as Stripe's own
  libraries do. The message id is the event's ``id``, read from the body once the body
  is proven authentic.
- `LegacySignature(secrets)`: idemclient's own earlier headers (see `_signature`),
  deprecated, kept so that a sender of them is still understood.

Every scheme fails closed (`SignatureInvalid`, `InvalidMessageId`), checks authenticity
before the timestamp (so "stale" is only said of what the sender really signed), and
compares in constant time against every candidate. Message ids with a ``.`` are refused
whatever the scheme: with one, ``{id}.{timestamp}.{body}`` can be regrouped into
another id and another body under the same signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets as _random
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Protocol

from .._errors import InvalidMessageId, SignatureInvalid
from ._inbox import validate_message_id
from ._signature import (
    MESSAGE_ID_HEADER,
    MIN_SECRET_BYTES,
    SIGNATURE_HEADER,
    check_age,
    check_tolerance,
    check_undotted,
    secret_bytes,
    sign,
    verify_signature,
)

__all__ = [
    "Headers",
    "LegacySignature",
    "SignatureScheme",
    "Signed",
    "StandardWebhooks",
    "StripeSignature",
    "header_value",
]

#: Headers as a framework hands them over: a mapping (case-insensitive or not), or
#: (name, value) pairs, which let a repeated header be seen and refused.
Headers = Mapping[str, str] | Iterable[tuple[str, str]]

# Bounds on what a parser looks at, so a hostile header costs little to refuse.
_MAX_HEADER_LENGTH = 4096
_MAX_SIGNATURES = 16
_MAX_TIMESTAMP_DIGITS = 12
_HEX = frozenset("0123456789abcdef")
_SECRET_PREFIX = "whsec_"  # noqa: S105 (the prefix, not a secret)


@dataclass(frozen=True, slots=True)
class Signed:
    """What a verified delivery proved: its message id and the signed timestamp."""

    message_id: str
    timestamp: int


class SignatureScheme(Protocol):
    """How one sender signs its deliveries. `verify` raises `SignatureInvalid` or
    `InvalidMessageId` unless the delivery is authentic and recent."""

    @property
    def name(self) -> str: ...

    def verify(self, headers: Headers, body: bytes, *, now: float, tolerance: float) -> Signed: ...


def header_value(headers: Headers, name: str) -> str | None:
    """The one value of header `name` (any case), None if absent.

    A header sent twice is refused (`ValueError`): of two message ids or two
    signature headers, neither can be trusted over the other.
    """
    wanted = name.lower()
    # Every pair is looked at, even in a mapping: a case-insensitive one (Starlette's)
    # lists a repeated header twice, and a plain dict may hold two spellings of it.
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = [value for key, value in pairs if key.lower() == wanted]
    if len(found) > 1:
        raise ValueError(f"the {name} header was sent {len(found)} times")
    return found[0] if found else None


def _headers(headers: Headers, *names: str) -> list[str | None]:
    try:
        return [header_value(headers, name) for name in names]
    except ValueError as exc:
        raise SignatureInvalid("malformed", str(exc)) from None


def _id_header(headers: Headers, name: str) -> str | None:
    """The one message id in header `name`, None if absent.

    A header sent twice reaches an ASGI app as two lines and a WSGI app as one line,
    the values joined by a comma (as RFC 9110 lets any recipient join them). A message
    id never holds a comma, so both are read as what they are, several values, and
    refused alike, in the same words: of two ids, neither can be trusted over the other.
    """
    wanted = name.lower()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    lines = [value for key, value in pairs if key.lower() == wanted]
    if not lines:
        return None
    values = ",".join(lines).split(",")
    if len(values) > 1:
        raise SignatureInvalid(
            "malformed", f"the {name} header holds {len(values)} values: a delivery has one id"
        )
    return values[0]


def _one_of_two_spellings(
    first: str | None, second: str | None, names: tuple[str, str]
) -> str | None:
    """The value of a header that may come under either of two names: either one, or
    both when they agree. Two that disagree are refused: each could be the delivery."""
    if first is not None and second is not None and first != second:
        raise SignatureInvalid(
            "malformed", f"the {names[0]} and {names[1]} headers disagree", message_id=None
        )
    return first if first is not None else second


def _message_id(raw: str | None, *, source: str) -> str:
    """A claimed message id, checked by the key rules and refused with a dot."""
    if raw is None:
        raise InvalidMessageId(None, f"no {source}")
    message_id = validate_message_id(raw)
    try:
        return check_undotted(message_id)
    except ValueError as exc:
        raise InvalidMessageId(message_id, str(exc)) from None


def _timestamp(text: str | None, *, source: str, message_id: str | None) -> int:
    if text is None or not text.strip():
        raise SignatureInvalid("missing", f"no {source}", message_id=message_id)
    text = text.strip()
    # str.isdigit accepts other scripts' digits; only ASCII 0-9 is a timestamp.
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_TIMESTAMP_DIGITS:
        raise SignatureInvalid(
            "malformed",
            f"the timestamp {text[:20]!r} is not a whole number of seconds",
            message_id=message_id,
        )
    return int(text)


def _any_matches(expected: Sequence[bytes], candidates: Sequence[bytes]) -> bool:
    matched = False
    for mine in expected:
        for theirs in candidates:
            # Every pair, in constant time: the time taken says nothing about how much
            # of a forged signature was right, nor which secret matched.
            matched |= hmac.compare_digest(mine, theirs)
    return matched


def _mismatch(message_id: str | None) -> SignatureInvalid:
    return SignatureInvalid(
        "mismatch",
        "no signature matches a secret we hold (forged, tampered, or an unknown secret)",
        message_id=message_id,
    )


def _secret_list(secrets: object, what: str) -> list[str | bytes]:
    if isinstance(secrets, str | bytes):
        return [secrets]
    if not isinstance(secrets, Iterable):
        raise TypeError(f"{what} takes a secret or a list of secrets, not {type(secrets)!r}")
    listed = list(secrets)
    if not listed:
        raise ValueError(f"{what} needs at least one secret")
    return listed


# -- Standard Webhooks -----------------------------------------------------------------


def standard_webhooks_key(secret: str | bytes) -> bytes:
    """The HMAC key of a Standard Webhooks secret: ``whsec_`` + base64, or raw bytes."""
    if isinstance(secret, bytes):
        key = bytes(secret)
    else:
        if not secret.startswith(_SECRET_PREFIX):
            raise ValueError(
                "a Standard Webhooks secret is 'whsec_' followed by the key in base64"
                f" (it starts {secret[:6]!r}); pass the key itself as bytes"
            )
        encoded = secret[len(_SECRET_PREFIX) :]
        try:
            # The padding may be left off; anything outside base64 is refused.
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                "a Standard Webhooks secret is 'whsec_' followed by the key in base64;"
                " this one's key is not valid base64"
            ) from None
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(
            f"a webhook key must be at least {MIN_SECRET_BYTES} bytes long, not {len(key)}"
        )
    return key


class StandardWebhooks:
    """Deliveries signed as the Standard Webhooks specification defines.

    `secrets`: the sender's secret (``whsec_...``), or several during a rotation; a
    delivery signed with any of them is accepted. Raw keys may be given as bytes.
    """

    name = "standard-webhooks"
    ID_HEADER = "webhook-id"
    TIMESTAMP_HEADER = "webhook-timestamp"
    SIGNATURE_HEADER = "webhook-signature"
    #: The same headers as Svix-based senders name them, read as these.
    SVIX_HEADERS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {
            ID_HEADER: "svix-id",
            TIMESTAMP_HEADER: "svix-timestamp",
            SIGNATURE_HEADER: "svix-signature",
        }
    )

    def __init__(self, secrets: str | bytes | Iterable[str | bytes]) -> None:
        self._keys = tuple(
            standard_webhooks_key(s) for s in _secret_list(secrets, "StandardWebhooks")
        )

    def __repr__(self) -> str:
        return f"StandardWebhooks(<{len(self._keys)} secret(s)>)"

    @staticmethod
    def generate_secret() -> str:
        """A fresh secret: ``whsec_`` and 24 random bytes in base64."""
        return _SECRET_PREFIX + base64.b64encode(_random.token_bytes(24)).decode()

    def _digests(self, message_id: str, timestamp: int, body: bytes) -> list[bytes]:
        signed = b"%s.%d." % (message_id.encode(), timestamp) + body
        return [hmac.new(key, signed, hashlib.sha256).digest() for key in self._keys]

    def signature(self, *, message_id: str, timestamp: int, body: bytes) -> str:
        """The ``webhook-signature`` value: one ``v1,<base64>`` per secret."""
        check_undotted(message_id)
        return " ".join(
            "v1," + base64.b64encode(digest).decode()
            for digest in self._digests(message_id, int(timestamp), body)
        )

    def headers(self, *, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three headers a sender attaches to one delivery."""
        return {
            self.ID_HEADER: message_id,
            self.TIMESTAMP_HEADER: str(int(timestamp)),
            self.SIGNATURE_HEADER: self.signature(
                message_id=message_id, timestamp=timestamp, body=body
            ),
        }

    def _read(self, headers: Headers) -> tuple[str | None, str | None, str | None]:
        """The id, timestamp and signature headers as sent (`webhook-*` or `svix-*`),
        each None if absent; `SignatureInvalid` ("malformed") for one sent twice, or
        sent under both names with two values."""
        read: list[str | None] = []
        for name in (self.ID_HEADER, self.TIMESTAMP_HEADER, self.SIGNATURE_HEADER):
            other = self.SVIX_HEADERS[name]
            if name == self.ID_HEADER:
                pair = (_id_header(headers, name), _id_header(headers, other))
            else:
                pair = (_headers(headers, name)[0], _headers(headers, other)[0])
            read.append(_one_of_two_spellings(*pair, names=(name, other)))
        raw_id, raw_timestamp, header = read
        return raw_id, raw_timestamp, header

    def verify(self, headers: Headers, body: bytes, *, now: float, tolerance: float) -> Signed:
        check_tolerance(tolerance)
        raw_id, raw_timestamp, header = self._read(headers)
        message_id = _message_id(raw_id, source=f"{self.ID_HEADER} (or svix-id) header")
        timestamp = _timestamp(
            raw_timestamp,
            source=f"{self.TIMESTAMP_HEADER} (or svix-timestamp) header",
            message_id=message_id,
        )
        candidates = self._parse(header, message_id)
        if not _any_matches(self._digests(message_id, timestamp, body), candidates):
            raise _mismatch(message_id)
        check_age(timestamp, now=now, tolerance=tolerance, message_id=message_id)
        return Signed(message_id, timestamp)

    def _parse(self, header: str | None, message_id: str) -> list[bytes]:
        """The ``v1`` signatures of a ``webhook-signature`` value, decoded.

        Entries are separated by spaces; entries of other versions (``v1a``, a public-key
        signature) are skipped, but at least one ``v1`` must be there.
        """
        if header is None or not header.strip():
            raise SignatureInvalid(
                "missing",
                f"no {self.SIGNATURE_HEADER} (or svix-signature) header",
                message_id=message_id,
            )
        if len(header) > _MAX_HEADER_LENGTH:
            raise SignatureInvalid(
                "malformed", "the signature header is too long", message_id=message_id
            )
        found: list[bytes] = []
        for entry in header.split():
            version, comma, encoded = entry.partition(",")
            if not comma or not version:
                raise SignatureInvalid(
                    "malformed", f"{entry[:40]!r} is not 'version,signature'", message_id=message_id
                )
            if version != "v1":
                continue
            try:
                digest = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                digest = b""
            if len(digest) != hashlib.sha256().digest_size:
                raise SignatureInvalid(
                    "malformed",
                    "a v1 signature is 32 bytes in base64",
                    message_id=message_id,
                )
            found.append(digest)
            if len(found) > _MAX_SIGNATURES:
                raise SignatureInvalid(
                    "malformed", f"more than {_MAX_SIGNATURES} signatures", message_id=message_id
                )
        if not found:
            raise SignatureInvalid("malformed", "no v1 signature", message_id=message_id)
        return found


# -- Stripe ----------------------------------------------------------------------------


class StripeSignature:
    """Stripe's webhooks: the ``Stripe-Signature`` header, the event id from the body.

    `secrets`: the endpoint's signing secret (``whsec_...``, as the Stripe dashboard or
    CLI shows it), or several while Stripe rolls it. Stripe uses the secret's text as
    the HMAC key (not base64-decoded), and so does this scheme.
    """

    name = "stripe"
    HEADER = "Stripe-Signature"

    def __init__(self, secrets: str | bytes | Iterable[str | bytes]) -> None:
        self._keys = tuple(secret_bytes(s) for s in _secret_list(secrets, "StripeSignature"))

    def __repr__(self) -> str:
        return f"StripeSignature(<{len(self._keys)} secret(s)>)"

    def _digests(self, timestamp: int, body: bytes) -> list[bytes]:
        signed = b"%d." % timestamp + body
        return [hmac.new(key, signed, hashlib.sha256).hexdigest().encode() for key in self._keys]

    def signature(self, *, timestamp: int, body: bytes) -> str:
        """The ``Stripe-Signature`` value, one ``v1`` per secret (for tests and tools)."""
        return ",".join(
            [f"t={int(timestamp)}"]
            + [f"v1={digest.decode()}" for digest in self._digests(int(timestamp), body)]
        )

    def verify(self, headers: Headers, body: bytes, *, now: float, tolerance: float) -> Signed:
        check_tolerance(tolerance)
        (header,) = _headers(headers, self.HEADER)
        timestamp, candidates = self._parse(header)
        if not _any_matches(self._digests(timestamp, body), candidates):
            raise _mismatch(None)
        # Authentic from here: the id inside the body is the sender's.
        try:
            event = json.loads(body)
        except ValueError:
            event = None
        raw_id = event.get("id") if isinstance(event, dict) else None
        if not isinstance(raw_id, str):
            raise InvalidMessageId(None, "the signed body is not a JSON event with a string 'id'")
        message_id = _message_id(raw_id, source="event id")
        check_age(timestamp, now=now, tolerance=tolerance, message_id=message_id)
        return Signed(message_id, timestamp)

    def _parse(self, header: str | None) -> tuple[int, list[bytes]]:
        """`t` and the ``v1`` signatures; items of other schemes (``v0``) are skipped."""
        if header is None or not header.strip():
            raise SignatureInvalid("missing", f"no {self.HEADER} header")
        if len(header) > _MAX_HEADER_LENGTH:
            raise SignatureInvalid("malformed", "the signature header is too long")
        timestamp: int | None = None
        found: list[bytes] = []
        for item in header.split(","):
            name, eq, value = item.strip().partition("=")
            if not eq or not name:
                raise SignatureInvalid("malformed", f"{item.strip()[:40]!r} is not name=value")
            if name == "t":
                if timestamp is not None:
                    raise SignatureInvalid("malformed", "more than one timestamp (t=)")
                timestamp = _timestamp(value, source="timestamp (t=)", message_id=None)
            elif name == "v1":
                digest = value.strip().lower()
                if len(digest) != 64 or not set(digest) <= _HEX:
                    raise SignatureInvalid("malformed", "a v1 signature is 64 hexadecimal digits")
                found.append(digest.encode())
                if len(found) > _MAX_SIGNATURES:
                    raise SignatureInvalid("malformed", f"more than {_MAX_SIGNATURES} signatures")
        if timestamp is None:
            raise SignatureInvalid("malformed", "no timestamp (t=)")
        if not found:
            raise SignatureInvalid("malformed", "no v1 signature")
        return timestamp, found


# -- idemclient's earlier scheme -------------------------------------------------------


class LegacySignature:
    """idemclient's own earlier headers (``Idemclient-Message-Id``,
    ``Idemclient-Signature: t=..,v1=<hex>``). Deprecated: no other sender or verifier
    speaks it; senders should move to Standard Webhooks."""

    name = "idemclient-v1"

    def __init__(self, secrets: str | bytes | Iterable[str | bytes], *, _warn: bool = True) -> None:
        if _warn:
            warnings.warn(
                "LegacySignature (the Idemclient-Signature headers) is deprecated: sign and"
                " verify with StandardWebhooks([...]) instead",
                DeprecationWarning,
                stacklevel=2,
            )
        self._keys = tuple(secret_bytes(s) for s in _secret_list(secrets, "LegacySignature"))

    def __repr__(self) -> str:
        return f"LegacySignature(<{len(self._keys)} secret(s)>)"

    def headers(self, *, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        return {
            MESSAGE_ID_HEADER: message_id,
            SIGNATURE_HEADER: sign(
                self._keys, timestamp=int(timestamp), message_id=message_id, body=body
            ),
        }

    def verify(self, headers: Headers, body: bytes, *, now: float, tolerance: float) -> Signed:
        raw_id = _id_header(headers, MESSAGE_ID_HEADER)
        (header,) = _headers(headers, SIGNATURE_HEADER)
        message_id = _message_id(raw_id, source=f"{MESSAGE_ID_HEADER} header")
        timestamp = verify_signature(
            header,
            secrets=self._keys,
            message_id=message_id,
            body=body,
            now=now,
            tolerance=tolerance,
        )
        return Signed(message_id, timestamp)


class _EitherOfTwo:
    """What a receiver given only `secrets=` (deprecated) verifies: Standard Webhooks
    when its headers are there, else the legacy headers, under the same secrets.

    Secrets that are not Standard Webhooks secrets serve only the legacy headers.
    """

    name = "standard-webhooks-or-idemclient-v1"

    def __init__(self, secrets: Sequence[str | bytes]) -> None:
        self._legacy = LegacySignature(secrets, _warn=False)
        usable: list[str | bytes] = []
        for secret in secrets:
            try:
                standard_webhooks_key(secret)
            except ValueError:
                continue
            usable.append(secret)
        self._standard = StandardWebhooks(usable) if usable else None

    def verify(self, headers: Headers, body: bytes, *, now: float, tolerance: float) -> Signed:
        names = (StandardWebhooks.SIGNATURE_HEADER, "svix-signature")
        first, second = _headers(headers, *names)
        standard_header = _one_of_two_spellings(first, second, names=names)
        if standard_header is not None:
            if self._standard is None:
                raise _mismatch(None)
            return self._standard.verify(headers, body, now=now, tolerance=tolerance)
        return self._legacy.verify(headers, body, now=now, tolerance=tolerance)
