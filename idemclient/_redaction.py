"""What of a request is never written to a store: the one rule, as pure functions.

A header or query parameter name *looks secret* when, lowercased and with everything
but letters and digits taken out (so ``X-Api_Key`` reads ``xapikey``), it contains one
of `SECRET_MARKS`, or it is one of the short `SECRET_NAMES` (query parameters such as
``sig``, which no mark can catch without catching ``design`` too). One exception: the
idempotency key's own header (``Idempotency-Key``, ``X-Idempotency-Key``) is not a
credential, and the key is stored in its own column anyway.

Request headers are persisted by an allow list: `PERSISTED_HEADERS` (they describe the
stored body, or what answer is wanted) and the names a user adds, never one that looks
secret. Every other header the request carried is *withheld*: its name is recorded,
never its value, and a resume must carry it again (the live client supplies it), or
nothing is sent. Response headers are kept unless they look secret (``Set-Cookie``),
so that an answer given back from the store keeps its ``Location`` and request id.

In a URL, the user and password go, and each secret-looking query parameter keeps its
name with an empty value: ``?access_token=...`` is stored, and fingerprinted, as
``?access_token=``. So a token rotating in the query is the same operation, a request
that lacks it is not, and an empty secret parameter counts as lacking it.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

import httpx

__all__ = [
    "DEFAULT_SECRET_HEADERS",
    "PERSISTED_HEADERS",
    "SECRET_MARKS",
    "SECRET_NAMES",
    "HeaderRule",
    "display_name",
    "looks_secret",
    "missing_headers",
    "origin_of",
    "redact_url",
    "secret_query_names",
    "shown_url",
]

Headers = tuple[tuple[str, str], ...]

#: Parts of a name that make it look secret (after lowercasing and dropping every
#: character but letters and digits).
SECRET_MARKS = (
    "auth",  # Authorization, Proxy-Authorization, X-Auth-Token, oauth_...
    "token",  # access_token, X-CSRF-Token, X-Amz-Security-Token
    "key",  # X-Api-Key, api_key, apikey
    "secret",  # client_secret, X-Client-Secret
    "password",
    "passwd",
    "passphrase",
    "signature",  # Stripe-Signature, X-Amz-Signature, Signature-Input
    "cookie",  # Cookie, Set-Cookie
    "session",  # X-Session-Id, session_token
    "credential",  # X-Amz-Credential
)
#: Whole names that look secret though they hold no mark.
SECRET_NAMES = frozenset({"sig", "pwd", "pass", "jwt"})
#: Names that hold a mark and are no secret.
_NOT_SECRET = frozenset({"idempotencykey", "xidempotencykey"})
#: The names every version has refused to write, kept for callers that read them.
DEFAULT_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
#: Request headers persisted with their values, beside those the user names.
PERSISTED_HEADERS = frozenset({"content-type", "content-encoding", "content-language", "accept"})
#: Not part of a request's meaning: recomputed (or set by the transport) each time.
_TRANSIENT = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "idempotency-key"}
)
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def _squeezed(name: str) -> str:
    return _NOT_ALNUM.sub("", name.lower())


@functools.lru_cache(maxsize=1024)
def looks_secret(name: str) -> bool:
    """Whether a header or query parameter called `name` may hold a credential."""
    # Cached: the same few header names are judged for every request and answer.
    squeezed = _squeezed(name)
    if squeezed in _NOT_SECRET:
        return False
    return squeezed in SECRET_NAMES or any(mark in squeezed for mark in SECRET_MARKS)


@dataclass(frozen=True, slots=True)
class HeaderRule:
    """Which headers a store writes: see the module docstring.

    `secret` are names the user adds to those that look secret; `persist`, names the
    user adds to `PERSISTED_HEADERS` (one that looks secret is refused). Both are kept
    lowercased.
    """

    secret: frozenset[str] = frozenset()
    persist: frozenset[str] = frozenset()
    #: what the rule says of each header name seen (see `_verdict`): the same few
    #: names come with every request and answer
    _verdicts: dict[str, int] = field(
        init=False, default_factory=dict, repr=False, compare=False, hash=False
    )
    #: what `split_request` keeps (by position) and withholds, by sequence of names
    _plans: dict[tuple[str, ...], tuple[tuple[int, ...], tuple[str, ...]]] = field(
        init=False, default_factory=dict, repr=False, compare=False, hash=False
    )

    @classmethod
    def of(cls, secret: Collection[str] = (), persist: Collection[str] = ()) -> HeaderRule:
        """A rule from the names a user gives, checked."""
        for what, names in (("secret_headers", secret), ("persist_headers", persist)):
            if isinstance(names, str):
                raise TypeError(f"{what} must be a collection of header names, not one string")
        secret_names = frozenset(name.lower() for name in secret)
        persist_names = frozenset(name.lower() for name in persist)
        refused = sorted(
            name for name in persist if looks_secret(name) or name.lower() in secret_names
        )
        if refused:
            raise ValueError(
                f"persist_headers names {', '.join(refused)}, which look(s) secret: a"
                " header that may hold a credential is never written to a store (the live"
                " client supplies it on resume)"
            )
        return cls(secret=secret_names, persist=persist_names)

    def is_secret(self, name: str) -> bool:
        lowered = name.lower()
        return lowered in self.secret or lowered in DEFAULT_SECRET_HEADERS or looks_secret(name)

    def _verdict(self, name: str) -> int:
        """What the rule says of a header `name`: a set of `_TRANSIENT_NAME`,
        `_PERSISTED`, `_SECRET`, `_URL` bits."""
        verdict = self._verdicts.get(name)
        if verdict is None:
            lowered = name.lower()
            verdict = (
                (_TRANSIENT_NAME if lowered in _TRANSIENT else 0)
                | (_PERSISTED if lowered in PERSISTED_HEADERS or lowered in self.persist else 0)
                | (_SECRET if self.is_secret(name) else 0)
                | (_URL if lowered in _URL_HEADERS else 0)
            )
            if len(self._verdicts) >= _VERDICTS_KEPT:  # a server may invent names
                self._verdicts.clear()
            self._verdicts[name] = verdict
        return verdict

    def split_request(self, headers: Iterable[tuple[str, str]]) -> tuple[Headers, tuple[str, ...]]:
        """The headers persisted with their values, and the names of those withheld
        (each once, as first spelled; transient ones are neither)."""
        pairs = tuple(headers)
        names = tuple(map(_first, pairs))
        plan = self._plans.get(names)
        if plan is None:
            # A client sends the same header names request after request: what is kept
            # and what withheld is worked out once per sequence of names.
            keep: list[int] = []
            withheld: dict[str, str] = {}
            for index, name in enumerate(names):
                verdict = self._verdict(name)
                if verdict & _TRANSIENT_NAME:
                    continue
                if verdict & (_PERSISTED | _SECRET) == _PERSISTED:
                    keep.append(index)
                else:
                    withheld.setdefault(name.lower(), name)
            plan = tuple(keep), tuple(withheld.values())
            if len(self._plans) >= _VERDICTS_KEPT:
                self._plans.clear()
            self._plans[names] = plan
        keep_at, withheld_names = plan
        return tuple([pairs[index] for index in keep_at]), withheld_names

    def response(self, headers: Iterable[tuple[str, str]]) -> Headers:
        """A response's headers as stored: the secret and transient ones gone, and the
        URLs some carry (`Location`, `Content-Location`) without their credentials."""
        kept: list[tuple[str, str]] = []
        for name, value in headers:
            verdict = self._verdict(name)
            if verdict & (_TRANSIENT_NAME | _SECRET):
                continue
            kept.append((name, redact_location(value) if verdict & _URL else value))
        return tuple(kept)


_first = operator.itemgetter(0)
#: The bits of a `HeaderRule` verdict on a header name.
_TRANSIENT_NAME, _PERSISTED, _SECRET, _URL = 1, 2, 4, 8
#: How many header names a `HeaderRule` remembers its verdict on.
_VERDICTS_KEPT = 512


def missing_headers(withheld: Iterable[str], headers: Iterable[tuple[str, str]]) -> list[str]:
    """The withheld header names that `headers` (a live request's) lacks."""
    present = {name.lower() for name, value in headers if value}
    return [name for name in withheld if name.lower() not in present]


def display_name(name: str) -> str:
    """A header name as people write it (httpx hands them over lowercased)."""
    return "-".join(part.capitalize() for part in name.split("-"))


def redact_url(url: httpx.URL) -> httpx.URL:
    """`url` as stored and fingerprinted: no user or password, and each secret-looking
    query parameter with its name only. A URL with neither is returned as it is, so
    its fingerprint is what every earlier version computed."""
    if url.userinfo:
        url = url.copy_with(userinfo=b"")
    if not url.query:
        return url  # no query to parse (parsing it costs more than the rest)
    pairs = url.params.multi_items()
    if not any(looks_secret(name) for name, _value in pairs):
        return url
    kept: list[tuple[str, str | int | float | bool | None]] = [
        (name, "" if looks_secret(name) else value)
        for name, value in pairs
        # An empty secret parameter carries no credential: it counts as absent.
        if not (looks_secret(name) and not value)
    ]
    return url.copy_with(query=str(httpx.QueryParams(kept)).encode("ascii") or None)


def redact_location(value: str) -> str:
    """A URL as written in an answer or in evidence (absolute or relative), without its
    credentials (see `redact_url`); a value that is not a URL is kept as it is."""
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, ValueError, TypeError):
        return value
    redacted = redact_url(url)
    return value if redacted is url else str(redacted)


def shown_url(url: str | httpx.URL) -> str:
    """`url` as logs, spans and error messages show it: as stored (see `redact_url`),
    so that none of them ever holds a user, a password or a secret query value. The one
    redaction every output of idemclient goes through."""
    if isinstance(url, httpx.URL):
        return str(redact_url(url))
    return redact_location(url)


#: Response headers whose value is a URL.
_URL_HEADERS = frozenset({"location", "content-location"})


def secret_query_names(url: httpx.URL) -> list[str]:
    """The secret-looking query parameters of a stored URL (their values withheld)."""
    return [name for name, _value in url.params.multi_items() if looks_secret(name)]


def origin_of(url: str | httpx.URL) -> str:
    """Scheme, host and port of `url`, as people write them (the default port left
    out): what an operation is bound to."""
    parsed = httpx.URL(url)
    default = _DEFAULT_PORTS.get(parsed.scheme)
    port = "" if parsed.port in (None, default) else f":{parsed.port}"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host  # IPv6
    return f"{parsed.scheme}://{host}{port}"


_DEFAULT_PORTS = {"http": 80, "https": 443}
