"""What makes two requests the same operation, as one hash.

Two requests are the same operation when they mean the same thing to the server: the
same method, path and query, and a body of the same meaning, read by its content type:

- JSON (``application/json``, ``*/*+json``): the same value. Object members in any
  order, any whitespace, any escaping of a string: the reference server hashes a body
  so too (compact, keys sorted). A number is the number it parses to;
- a form (``application/x-www-form-urlencoded``): the same fields, ``+`` and ``%20``
  alike. Fields of different names in any order; the values of one name in theirs
  (``a=1&a=2`` is a list);
- multipart (``multipart/form-data``): the same parts, whatever the boundary (httpx
  draws a new one for every request): each part's name, filename, content type, other
  headers and bytes. Parts of different names in any order; those of one name in theirs;
- anything else, a body with a content encoding, or one that does not parse as what
  its content type says (JSON with a name twice, a multipart body without its
  boundary): the same bytes.

The body's kind is part of the hash: a JSON body and the same bytes sent as text are
not the same request. The origin (scheme, host, port) is left out: an operation is
bound to its origin by a check of its own, which can say so by name (see
`_store._rows.mismatch`). `url` is the request's URL as stored (see
`_redaction.redact_url`), so a credential rotating in the query is the same operation.

Fingerprints carry their rule. This one's start with ``v2:``. Earlier versions wrote
64 hex digits of a hash over the bytes (`bytes_fingerprint`), and stores keep them:
`same` compares a request with a recorded fingerprint by the rule it was made with, so
an operation recorded before an upgrade is the same operation after it when it is
re-issued with the same bytes (and `_store._rows` compares it by its meaning where the
record still holds the body that fingerprint was made over).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx

__all__ = [
    "Fingerprints",
    "body_type",
    "bytes_fingerprint",
    "fingerprint",
    "fingerprints",
    "is_current",
    "same",
]

#: What starts a fingerprint made by this rule (earlier ones: 64 hex digits, no prefix).
CURRENT = "v2:"

# A value fed to the hash, tagged so that no two different values feed the same bytes.
_Value = bytes | None | Sequence["_Value"]


def fingerprint(
    method: str,
    url: httpx.URL,
    body: bytes,
    *,
    content_type: str | None = None,
    content_encoding: str | None = None,
) -> str:
    """The fingerprint of a request, by its meaning (see the module docstring)."""
    return _kept_fingerprints(method, url.raw_path, content_type, content_encoding)(body)


class Fingerprints:
    """`fingerprint` of many bodies sent with one method to one URL with one content
    type: the method and the URL are hashed once."""

    __slots__ = ("_canonical", "_method", "_raw_path", "_start")

    def __init__(
        self,
        method: str,
        url: httpx.URL,
        *,
        content_type: str | None = None,
        content_encoding: str | None = None,
    ) -> None:
        self._begin(method, url.raw_path, content_type, content_encoding)

    def _begin(
        self, method: str, raw_path: bytes, content_type: str | None, content_encoding: str | None
    ) -> None:
        self._method, self._raw_path = method.encode(), raw_path
        self._canonical = _reader(content_type, content_encoding)
        self._start = hashlib.sha256()
        _feed(self._start, (CURRENT.encode(), self._method, self._raw_path))

    def __call__(self, body: bytes) -> str:
        digest = self._start.copy()
        kind, meaning = self._canonical(body)
        if type(meaning) is bytes:
            # What `_feed` feeds for (kind, meaning), in two calls rather than seven.
            digest.update(_pair_head(kind) + len(meaning).to_bytes(8, "big"))
            digest.update(meaning)
        else:
            _feed(digest, (kind, meaning))
        return CURRENT + digest.hexdigest()

    def matches(self, recorded: str, body: bytes) -> bool:
        """`body` sent here is the request `recorded` (a fingerprint made by this rule or
        an earlier one) was made of."""
        if recorded.startswith(CURRENT):
            return self(body) == recorded
        return _bytes_digest(self._method, self._raw_path, body) == recorded


def fingerprints(
    method: str,
    url: httpx.URL,
    *,
    content_type: str | None = None,
    content_encoding: str | None = None,
) -> Fingerprints:
    """A `Fingerprints` for bodies sent with `method` to `url` (see `fingerprint`): one
    made before for the same method, path and body type, if it is still kept."""
    return _kept_fingerprints(method, url.raw_path, content_type, content_encoding)


@functools.lru_cache(maxsize=256)  # a client posts to a few paths (ids in paths: evicted)
def _kept_fingerprints(
    method: str, raw_path: bytes, content_type: str | None, content_encoding: str | None
) -> Fingerprints:
    # Shared: a `Fingerprints` is never changed once made (each body hashes a copy).
    made = Fingerprints.__new__(Fingerprints)
    made._begin(method, raw_path, content_type, content_encoding)
    return made


def bytes_fingerprint(method: str, url: httpx.URL, body: bytes) -> str:
    """The fingerprint earlier versions made, and stores keep: sha256 over method, path
    and query, and the body's bytes, each length-prefixed, as 64 hex digits."""
    return _bytes_digest(method.encode(), url.raw_path, body)


def is_current(recorded: str) -> bool:
    """`recorded` was made by this version's rule (else an earlier version's)."""
    return recorded.startswith(CURRENT)


def same(
    recorded: str,
    method: str,
    url: httpx.URL,
    body: bytes,
    *,
    content_type: str | None = None,
    content_encoding: str | None = None,
) -> bool:
    """The request is the one `recorded` was made of, by the rule it was made with."""
    return fingerprints(
        method, url, content_type=content_type, content_encoding=content_encoding
    ).matches(recorded, body)


def body_type(
    headers: Iterable[tuple[str, str | None]], *, lowercase: bool = False
) -> dict[str, str | None]:
    """The content type and encoding among `headers` (name, value pairs, as an intent
    or a record keeps them), as `fingerprint` takes them: the last of a repeated one,
    as a multi-dict of headers keeps it. `lowercase`: every name is in lower case
    already (a live request's, read by `_frame.read_headers`)."""
    if lowercase:
        named = dict(headers)
        return {
            "content_type": named.get("content-type"),
            "content_encoding": named.get("content-encoding"),
        }
    content_type = content_encoding = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == "content-type":
            content_type = value
        elif lowered == "content-encoding":
            content_encoding = value
    return {"content_type": content_type, "content_encoding": content_encoding}


def _bytes_digest(method: bytes, raw_path: bytes, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method, raw_path, body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


# -- the body's meaning -------------------------------------------------------------------


@functools.lru_cache(maxsize=64)  # a client sends a few types (a multipart's: one each)
def _reader(
    content_type: str | None, content_encoding: str | None
) -> Callable[[bytes], tuple[bytes, _Value]]:
    """What of a body of this type is hashed: its kind, and its meaning."""
    if content_encoding is not None and content_encoding.strip().lower() not in ("", "identity"):
        return _as_bytes  # compressed: its meaning is not read here
    media, params = _media_type(content_type or "")
    if media == "application/json" or (media.startswith("application/") and media[-5:] == "+json"):
        return _tagged(b"json", _json)
    if media == "application/x-www-form-urlencoded":
        return _tagged(b"form", _form)
    boundary = params.get("boundary")
    if media == "multipart/form-data" and boundary:
        return _tagged(b"multipart", lambda body: _multipart(body, boundary))
    return _as_bytes


def _as_bytes(body: bytes) -> tuple[bytes, _Value]:
    return (b"bytes", body)


def _tagged(
    kind: bytes, read: Callable[[bytes], _Value | None]
) -> Callable[[bytes], tuple[bytes, _Value]]:
    """`read`, with its kind; a body it cannot read is its bytes."""

    def canonical(body: bytes) -> tuple[bytes, _Value]:
        try:
            meaning = read(body)
        except (ValueError, RecursionError):  # UnicodeError is a ValueError
            meaning = None
        return _as_bytes(body) if meaning is None else (kind, meaning)

    return canonical


_PARAM = re.compile(r';\s*([^\s=;]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')


def _media_type(value: str) -> tuple[str, dict[str, str]]:
    """A Content-Type's media type (lower case) and its parameters (names lower case,
    quoted values unquoted)."""
    media, _, rest = value.partition(";")
    params = {name.lower(): _unquoted(raw.strip()) for name, raw in _PARAM.findall(";" + rest)}
    return media.strip().lower(), params


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


# JSON, read as the reference server reads a payment: a name twice in one object, NaN or
# Infinity, a number no float holds: not one value (read as bytes).


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a name appears twice in one object")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range")
    return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique, parse_constant=_refuse_constant, parse_float=_finite
)
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
#: `_ENCODER.encode` without the encoder it builds anew for each value: CPython's C
#: encoder made once with the same settings (which is what `encode` builds, less the
#: check for a value that contains itself, which no parsed document does).
_encode_chunks: Callable[[Any, int], Sequence[str]] | None
try:
    from _json import make_encoder as _make_encoder
except ImportError:  # an interpreter without the C encoder
    _encode_chunks = None
else:
    _encode_chunks = _make_encoder(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )


#: What `_DECODER.decode` reads a document with, at an index (its hooks included).
_scan_once: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _json(body: bytes) -> _Value:
    text = body.decode("utf-8")
    try:
        # A document with nothing around it, read at once (`decode` also skips the
        # whitespace around one, and refuses what follows it).
        value, end = _scan_once(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        value = _DECODER.decode(text)
    encoded = (
        _ENCODER.encode(value) if _encode_chunks is None else "".join(_encode_chunks(value, 0))
    )
    return encoded.encode("utf-8", "surrogatepass")


def _form(body: bytes) -> _Value:
    fields: list[tuple[bytes, _Value]] = []
    for field in body.split(b"&"):
        if not field:
            continue
        name, _, value = field.partition(b"=")
        fields.append((_form_text(name), _form_text(value)))
    return _by_name(fields)


def _form_text(raw: bytes) -> bytes:
    return unquote_to_bytes(raw.replace(b"+", b" "))


def _multipart(body: bytes, boundary: str) -> _Value | None:
    """The parts of a multipart body, or None if it is not one with this boundary."""
    delimiter = b"--" + boundary.encode("latin-1")
    if body.startswith(delimiter):
        rest = body[len(delimiter) :]
    else:  # a preamble, which means nothing, before the first delimiter
        start = body.find(b"\r\n" + delimiter)
        if start < 0:
            return None
        rest = body[start + 2 + len(delimiter) :]
    parts: list[tuple[bytes, _Value]] = []
    while not rest.startswith(b"--"):  # the close delimiter: what follows means nothing
        line_end = rest.find(b"\r\n")
        if line_end < 0 or rest[:line_end].strip(b" \t"):
            return None
        rest = rest[line_end + 2 :]
        end = rest.find(b"\r\n" + delimiter)
        if end < 0:
            return None
        part, rest = rest[:end], rest[end + 2 + len(delimiter) :]
        read = _part(part)
        if read is None:
            return None
        parts.append(read)
    return _by_name(parts)


def _part(part: bytes) -> tuple[bytes, _Value] | None:
    """One part: its name, and what of it is hashed (its headers, read, and bytes)."""
    if part.startswith(b"\r\n"):
        head, content = b"", part[2:]
    else:
        head, found, content = part.partition(b"\r\n\r\n")
        if not found:
            return None
    headers: dict[str, str] = {}
    for line in head.split(b"\r\n") if head else ():
        field, colon, value = line.decode("latin-1").partition(":")
        if not colon or not field.strip() or field[0] in " \t" or field.strip().lower() in headers:
            return None  # folded, nameless or repeated: not read here
        headers[field.strip().lower()] = value.strip()
    disposition, params = _media_type(headers.pop("content-disposition", ""))
    name = params.get("name")
    if disposition != "form-data" or name is None:
        return None
    described = tuple(
        tuple((key.encode("latin-1"), value.encode("latin-1")) for key, value in sorted(pairs))
        for pairs in (params.items(), headers.items())
    )
    return name.encode("latin-1"), (described, content)


def _by_name(fields: Sequence[tuple[bytes, _Value]]) -> _Value:
    """Fields in the order that means something: by name, each name's in theirs."""
    return tuple((name, value) for name, value in sorted(fields, key=lambda field: field[0]))


@functools.lru_cache(maxsize=8)
def _pair_head(kind: bytes) -> bytes:
    """What `_feed` feeds for a pair (kind, bytes) before the second's length: the pair
    counted, the kind length-prefixed, the second marked as bytes."""
    return b"l" + (2).to_bytes(8, "big") + b"b" + len(kind).to_bytes(8, "big") + kind + b"b"


def _feed(digest: Any, value: _Value) -> None:
    """Feed `value` to `digest` so that two different values never feed the same bytes:
    bytes length-prefixed, None marked, a sequence counted."""
    if value is None:
        digest.update(b"n")
    elif isinstance(value, bytes):
        digest.update(b"b" + len(value).to_bytes(8, "big"))
        digest.update(value)
    else:
        digest.update(b"l" + len(value).to_bytes(8, "big"))
        for item in value:
            _feed(digest, item)
