"""Server profiles: what one server family means by its idempotency answers.

A `RetryPolicy` says how hard to try; a `Profile` says what the server means: where it
looks for the key and what a key may be, how long it keeps keys, how it marks a replay,
and which answers mean "still running", "same key, other request", "already done,
here is the resource" or "sign this first". Each is an immutable value; a caller's own
is a built-in with changes (`profiles.stripe.replace(...)`).

Classifying an answer by its profile (`read_answer`) is pure: the status, the headers
and, where the status is not enough, the error codes in the body (`codes_in`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ._errors import InvalidKey
from ._keys import validate_key

__all__ = [
    "QUOTINGS",
    "Endpoint",
    "Existing",
    "KeyFormat",
    "KeySlot",
    "Lookup",
    "Match",
    "Profile",
    "Resolved",
    "codes_in",
    "existing_url",
]

HOUR = 3600.0
DAY = 24 * HOUR
#: The shortest key retention any provider publishes (Mollie: one hour). A profile
#: whose server does not say how long it keeps keys assumes this.
SHORTEST_PUBLISHED_RETENTION = HOUR
#: How much of a body is read to find an error code in it.
MAX_CODE_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class KeySlot:
    """Where the key goes: a header, or a field of the JSON body (top level)."""

    header: str | None = "Idempotency-Key"
    field: str | None = None
    #: the header's value is an RFC 8941 quoted string (the IETF draft): ``"key"``
    quoted: bool = False

    def __post_init__(self) -> None:
        if (self.header is None) == (self.field is None):
            raise ValueError("KeySlot: give a header or a body field, exactly one")
        if self.quoted and self.header is None:
            raise ValueError("KeySlot: only a header's key can be quoted")

    @property
    def where(self) -> str:
        if self.header is not None:
            return f"header {self.header}" + (" (quoted string)" if self.quoted else "")
        return f"JSON body field {self.field!r}"

    def header_value(self, key: str) -> str:
        return f'"{key}"' if self.quoted else key

    def key_from_header(self, value: str) -> str:
        """The key in a header value (unquoted if the slot quotes it)."""
        if self.quoted:
            text = value.strip()
            if len(text) >= 2 and text[0] == text[-1] == '"' and "\\" not in text:
                return text[1:-1]
            raise InvalidKey(value, f'{self.header} must be a quoted string here, like "key"')
        return value


@dataclass(frozen=True, slots=True)
class KeyFormat:
    """What the server accepts as a key. A key outside it is refused before anything
    is recorded or sent. Every key is also within idemclient's own rule (1..255 of
    ``A-Z a-z 0-9 - _ . : ~``)."""

    min_length: int = 1
    max_length: int = 255
    #: a regular expression the whole key must match, if the server says
    pattern: str | None = None
    #: in words, for the error
    described: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError("KeyFormat: need 1 <= min_length <= max_length")
        if self.pattern is not None:
            re.compile(self.pattern)

    def check(self, key: str, profile: str) -> str:
        validate_key(key)
        if not self.min_length <= len(key) <= self.max_length:
            raise InvalidKey(
                key,
                f"is {len(key)} characters long; the {profile} profile's server takes"
                f" {self.min_length}..{self.max_length} here",
            )
        if self.pattern is not None and re.fullmatch(self.pattern, key) is None:
            raise InvalidKey(
                key,
                f"is not a key the {profile} profile's server takes here"
                f" ({self.described or self.pattern})",
            )
        return key


@dataclass(frozen=True, slots=True)
class Match:
    """An answer that means something particular: one of `statuses`, and if given, one
    of `codes` among the body's error codes and `header` present with that value."""

    statuses: frozenset[int]
    codes: frozenset[str] = frozenset()
    #: (name, value), the value compared without regard to case; ``*``: any value
    header: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "statuses", frozenset(self.statuses))
        object.__setattr__(self, "codes", frozenset(c.strip().casefold() for c in self.codes))

    def matches(self, status: int, headers: Mapping[str, str], codes: frozenset[str]) -> bool:
        if status not in self.statuses:
            return False
        if self.codes and not (self.codes & codes):
            return False
        if self.header is not None:
            name, value = self.header
            found = headers.get(name)
            if found is None or (value != "*" and found.strip().casefold() != value.casefold()):
                return False
        return True


_SUCCEEDED_UNREAD = frozenset({"succeeded", "completed"})


@dataclass(frozen=True, slots=True)
class Existing:
    """ "Already done, here is the resource": the server made it under this key before
    and names it instead of replaying (GoCardless).

    The operation's outcome is what the answer to the request that made it would have
    been: the resource, made, so `succeeded`, with the resource fetched as its answer.
    Its status is the payment's own life (pending, collected, failed days later...),
    for the application to read; it does not undo the creation. Only a status the
    profile names says otherwise: `failed` (the creating request was refused), or
    `creating` (the creating request is still running: no answer yet, the operation
    stays unsettled)."""

    match: Match
    #: where the resource's id is in the body (a dotted path; ``*`` for each list item)
    id_path: str
    #: where to fetch it, relative to the request's URL; ``{id}`` is the id
    fetch: str = "{path}/{id}"
    #: where the fetched resource keeps its status (in the body, or in the one object
    #: the body wraps it in: GoCardless's ``{"payments": {...}}``)
    status_field: str = "status"
    #: deprecated, no longer read: every status not in `failed` or `creating` is a
    #: creation that succeeded
    succeeded: frozenset[str] = _SUCCEEDED_UNREAD
    #: statuses a resource has only when the request that made it was refused (the
    #: server answered it with a refusal, and keeps the resource as a record of that):
    #: the operation is `failed`, with the resource
    failed: frozenset[str] = frozenset()
    #: statuses that say the request that makes it is still running at the server (its
    #: answer not decided yet): the operation stays unsettled, to resume later
    creating: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.succeeded != _SUCCEEDED_UNREAD:
            warnings.warn(
                "Existing(succeeded=...) is no longer read: a resource the server names as"
                " made under the key is a creation that succeeded, whatever its status,"
                " unless its status is in failed= (refused) or creating= (still being made)",
                DeprecationWarning,
                stacklevel=3,
            )
        for name in ("failed", "creating"):
            object.__setattr__(self, name, frozenset(s.lower() for s in getattr(self, name)))


#: A host a profile names: labels of a-z 0-9 -, and ``*`` only at the start, standing
#: for a prefix of one label or more (``*.api.checkout.com``, ``*-pal-live.adyenpayments.com``).
_HOST = re.compile(r"(\*[.-])?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")

#: How a look-up template quotes what it fills in: "url", URL-quoting alone (a path
#: segment or a query parameter's whole value); "search", a string inside the quotes of
#: a search query (Stripe's search syntax: a quote is escaped with a backslash; a value
#: with a backslash or a control character is refused, never sent).
QUOTINGS = frozenset({"url", "search"})


@dataclass(frozen=True, slots=True)
class Lookup:
    """How `reconcile()` finds an operation on this server without sending it again."""

    #: a URL template with ``{reference}`` or ``{key}``; ``{path}`` at its start is the
    #: operation's own URL (its path, at its origin): the look-up of its resource
    template: str
    #: where a payment's status is
    status_field: str = "status"
    #: the server's statuses that are final: applied (succeeded) or refused (failed)
    succeeded: frozenset[str] = frozenset({"succeeded", "completed"})
    failed: frozenset[str] = frozenset({"failed", "declined"})
    #: how `{reference}` and `{key}` are quoted (`QUOTINGS`); None: read from the
    #: template (a slot right after a quote, ``'`` ``"`` or ``%27`` ``%22``, is "search")
    quoting: str | None = None
    #: the operations this look-up can find, as globs of their paths (``*`` matches
    #: across ``/``); an operation elsewhere is not looked up here, since "none found"
    #: would say nothing of it. Empty: every operation (a template starting with
    #: ``{path}``, the operation's own path, covers every operation anyway)
    covers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.quoting is not None and self.quoting not in QUOTINGS:
            raise ValueError(
                f"Lookup: quoting {self.quoting!r} is none of {', '.join(sorted(QUOTINGS))}"
            )
        if "{path}" in self.template and not self.template.startswith("{path}"):
            raise ValueError("Lookup: {path} (the operation's path) must start the template")

    def covers_path(self, path: str) -> bool:
        """Whether an operation sent to `path` can be found by this look-up."""
        if self.template.startswith("{path}") or not self.covers:
            return True
        return any(fnmatch.fnmatchcase(path, glob) for glob in self.covers)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a fact differs by endpoint: requests whose path matches `path` (a glob:
    ``*`` matches across ``/``) and, if given, one of `methods`."""

    path: str
    methods: frozenset[str] = frozenset()
    key: KeySlot | None = None
    key_format: KeyFormat | None = None
    key_retention: float | None = None
    #: False: the server takes no key here; the request passes through without one
    keyed: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))

    def applies(self, method: str, path: str) -> bool:
        return (not self.methods or method in self.methods) and fnmatch.fnmatchcase(path, self.path)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A profile's facts for one request (its endpoint's where they differ)."""

    profile: Profile
    keyed: bool
    key: KeySlot
    key_format: KeyFormat
    key_retention: float

    def check_key(self, key: str) -> str:
        return self.key_format.check(key, self.profile.name)


@dataclass(frozen=True, slots=True)
class Profile:
    """How one server family does idempotency. Immutable: `replace(...)` makes your own.

    Every field has the reading of the IETF draft unless set; a fact a provider does not
    publish takes the safe reading (see the built-ins in `idemclient.profiles`).
    """

    name: str
    key: KeySlot = KeySlot()
    key_format: KeyFormat = KeyFormat()
    #: the methods that get a key (the policy's `methods` when None)
    methods: frozenset[str] | None = None
    #: how long the server keeps a key, in seconds; an operation that may have been
    #: applied and is older is looked up, never re-sent
    key_retention: float = DAY
    #: the server publishes `key_retention` (False: an assumption, see the docs)
    retention_published: bool = False
    #: the header (name, value) that marks an answer as a replay of the stored one
    replay_marker: tuple[str, str] | None = ("Idempotent-Replayed", "true")
    #: the server answers a finished key with its stored answer, errors included: a
    #: refusal after an attempt that may have been applied is then the answer
    replays_errors: bool = False
    #: an answer that is the stored success given again with another status
    #: (django-idempotency-key's 409)
    replay: Match | None = None
    #: "still running, try again later": retried with the same key
    in_progress: tuple[Match, ...] = (Match(frozenset({409})),)
    #: "busy, nothing done, try again" (a lock not taken): retried, never applied
    throttled: tuple[Match, ...] = ()
    #: "this key was used for another request": `KeyConflict`
    mismatch: tuple[Match, ...] = (Match(frozenset({422})),)
    #: "already done, here is the resource": succeeded, the resource fetched
    existing: Existing | None = None
    #: "sign this first" (Wise's strong customer authentication): state `challenged`
    challenge: Match | None = None
    #: a payment declined in a success's body (Adyen's `resultCode` `Refused`,
    #: Checkout.com's `status` `Declined`): a 2xx with one of these codes at
    #: `code_paths` is a final refusal, `failed`, never a success
    declined: tuple[Match, ...] = ()
    #: answers the server does not keep under the key, so that the same key sent again
    #: runs the request again (Checkout.com keeps only 2xx): never retried
    unstored: frozenset[int] = frozenset()
    #: headers by which the server says whether to retry, obeyed over the status
    hints: tuple[str, ...] = ()
    #: where a JSON error body keeps its codes and messages (dotted; ``*`` per item)
    code_paths: tuple[str, ...] = ()
    #: a second request with a key still running is answered `in_progress` (or waits);
    #: False (or unknown): after an attempt that may have been applied, no retry
    guards_in_flight: bool = True
    #: where the server does not guard a key in flight: how long, in seconds, a request
    #: it took may still be running there after the client stopped waiting for it (its
    #: own timeouts, a crash and its recovery). An operation that may have been applied
    #: is not sent again before then, by any call or `resume()`.
    in_flight_for: float = 900.0
    endpoints: tuple[Endpoint, ...] = ()
    lookup: Lookup | None = None
    #: what the profile assumes where its provider publishes nothing, in words
    assumptions: str = ""
    #: the provider's API hosts (production and sandbox), lower case; ``*`` at the start
    #: of one stands for a merchant's own prefix (``*.api.checkout.com``). A client
    #: that chose no profile speaks this one at them, and one that chose another is
    #: refused there (see `idemclient._hosts`)
    hosts: tuple[str, ...] = ()
    #: statuses whose meaning depends on the body's error codes here (derived)
    needs_codes: frozenset[int] = field(init=False, repr=False, compare=False)
    #: statuses this profile gives a meaning of its own: an answer with one of them that
    #: matches none of its patterns is an ordinary refusal (derived)
    claimed: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", self.name):
            raise ValueError(
                f"Profile: name {self.name!r} must be 1..64 of a-z 0-9 _ . - (it is stored"
                " with each operation)"
            )
        if not (math.isfinite(self.key_retention) and self.key_retention > 0):
            raise ValueError("Profile: key_retention must be a positive number of seconds")
        # NaN would hold nothing (it compares false with every time), a negative value
        # ends the window before the send, infinity holds for ever.
        if not (math.isfinite(self.in_flight_for) and self.in_flight_for >= 0):
            raise ValueError("Profile: in_flight_for must be a finite number of seconds >= 0")
        if self.methods is not None:
            object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))
        for endpoint in self.endpoints:
            if endpoint.key_retention is not None and not endpoint.key_retention > 0:
                raise ValueError(f"Profile: endpoint {endpoint.path} key_retention must be > 0")
        # One name given as a string would be read as its characters.
        object.__setattr__(self, "hosts", _hosts_of(self.hosts))
        for host in self.hosts:
            if _HOST.fullmatch(host) is None:
                raise ValueError(
                    f"Profile: host {host!r} must be a host name in lower case, without"
                    " scheme, port or path; '*' may only start it (a merchant's prefix)"
                )
        for match in self.declined:
            if not match.codes or not all(200 <= s < 300 and s != 202 for s in match.statuses):
                raise ValueError(
                    "Profile: a declined answer is a 2xx other than 202 with error codes"
                    " (every 2xx would otherwise be a refusal)"
                )
        # Read on every answer: worked out once, here.
        patterns = self._patterns()
        needs = {s for m in (*patterns, *self.declined) if m.codes for s in m.statuses}
        if self.existing is not None:
            needs |= self.existing.match.statuses  # its body names the resource
        object.__setattr__(self, "needs_codes", frozenset(needs))
        object.__setattr__(self, "claimed", frozenset(s for m in patterns for s in m.statuses))

    def replace(self, **changes: Any) -> Profile:
        """A copy with `changes` (validated like a new profile)."""
        return dataclasses.replace(self, **changes)

    def with_retention(self, seconds: float) -> Profile:
        """A copy whose server keeps every key `seconds` (every endpoint's too): what
        an operator who knows their provider's retention says."""
        endpoints = tuple(dataclasses.replace(e, key_retention=None) for e in self.endpoints)
        return self.replace(key_retention=seconds, endpoints=endpoints, retention_published=True)

    def resolve(self, method: str, path: str, methods: frozenset[str]) -> Resolved:
        """The facts for a request to `path` with `method`: the first endpoint that
        applies overrides the profile's own. `methods` are the policy's unsafe methods,
        which get a key unless the profile names its own."""
        method = method.upper()
        keyed = method in (self.methods if self.methods is not None else methods)
        key, key_format, retention = self.key, self.key_format, self.key_retention
        for endpoint in self.endpoints:
            if endpoint.applies(method, path):
                key = endpoint.key or key
                key_format = endpoint.key_format or key_format
                retention = endpoint.key_retention or retention
                keyed = endpoint.keyed and (keyed or bool(endpoint.methods))
                break
        return Resolved(self, keyed, key, key_format, retention)

    def existing_id(self, status: int, headers: Mapping[str, str], body: bytes) -> str | None:
        """The resource an "already done" answer names, if this is one."""
        if self.existing is None or status not in self.existing.match.statuses:
            return None
        if not self.existing.match.matches(status, headers, codes_in(body, self.code_paths)):
            return None
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None
        for value in values_at(document, self.existing.id_path):
            if isinstance(value, str) and value:
                return value
        return None

    def answers_at(self, host: str) -> bool:
        """`host` (lower case, no trailing dot) is one of this profile's provider's API
        hosts."""
        return any(
            host == pattern
            or (pattern[0] == "*" and host.endswith(pattern[1:]) and len(host) > len(pattern) - 1)
            for pattern in self.hosts
        )

    def replayed(self, headers: Mapping[str, str]) -> bool:
        """The answer is marked as a replay of the stored one."""
        if self.replay_marker is None:
            return False
        name, value = self.replay_marker
        return headers.get(name, "").strip().casefold() == value.casefold()

    def _patterns(self) -> list[Match]:
        """Every answer pattern this profile gives a meaning of its own."""
        patterns = [*self.in_progress, *self.mismatch, *self.throttled]
        patterns += [m for m in (self.replay, self.challenge) if m is not None]
        if self.existing is not None:
            patterns.append(self.existing.match)
        return patterns


def _hosts_of(hosts: object) -> tuple[str, ...]:
    if isinstance(hosts, str) or not isinstance(hosts, tuple | list | frozenset | set):
        raise TypeError(f"Profile: hosts is a tuple of host names, not {hosts!r}")
    return tuple(hosts)


def existing_url(request_url: Any, template: str, resource: str) -> str:
    """Where to fetch the resource an "already done" answer names: `template` with
    ``{path}`` the request's path and ``{id}`` the resource's id (URL-quoted)."""
    path = str(request_url.path).rstrip("/")
    base = str(request_url.copy_with(path="/", query=None, fragment=None)).rstrip("/")
    return base + template.format(path=path, id=quote(resource, safe=""))


def codes_in(body: bytes, paths: Iterable[str]) -> frozenset[str]:
    """The strings at `paths` in a JSON body (case-folded), or none if it is not JSON."""
    if not body or len(body) > MAX_CODE_BODY:
        return frozenset()
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return frozenset()
    found: set[str] = set()
    for path in paths:
        for value in values_at(document, path):
            if isinstance(value, str | int) and not isinstance(value, bool):
                found.add(str(value).strip().casefold())
    return frozenset(found)


def values_at(document: Any, path: str) -> Iterator[Any]:
    """Every value at a dotted `path` in a JSON document (``*``: each item of a list)."""
    nodes = [document]
    for part in path.split("."):
        following: list[Any] = []
        for node in nodes:
            if part == "*" and isinstance(node, list):
                following.extend(node)
            elif isinstance(node, Mapping) and part in node:
                following.append(node[part])
        nodes = following
    yield from nodes
