"""What a server profile means for the reference server: its dialect, pure.

`ReferenceServer(profile=...)` speaks one `idemclient.profiles.Profile`: it reads the
key where that provider puts it, refuses a key outside its format, and answers "still
running", "same key, other request", a replay and "already done, here is the
resource" the way that provider does. A `Dialect` holds every such decision for one
profile, as values and pure functions, so the phase machine (`_machine.core`) only
asks it: what is the key, what do I answer, do I store this.

Most decisions come from the profile's own fields (so a profile of your own works):
the key slot and format per endpoint (`Profile.resolve`), the replay marker, the
statuses, codes and headers of `in_progress`, `mismatch`, `replay`, `existing` and
`challenge`, `guards_in_flight`, the key retention and the look-up template. Where a
provider's body shape matters, a small builder per built-in profile writes it
(`_BODIES`); a profile of your own gets a body built from its `Match` values (its
first status, its first code at its first code path, its header), which its own
classifier reads back the same way. What only a built-in's provider does (which
endpoints require a key, extra paths the payment resource is served under, which
answers are stored) is in `_FAMILIES`, keyed by the built-in's name.
"""

from __future__ import annotations

import enum
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

from ... import profiles as _builtins
from ..._errors import InvalidKey
from ..._profile import Match, Profile, Resolved
from ..._reconcile import quoting_of
from .messages import ServerRequest, ServerResponse, json_bytes
from .rules import JSON_CONTENT_TYPE, Problem, check_storable, parse_idempotency_key

__all__ = ["Dialect", "InFlight", "Mismatch", "Route", "Search", "dialect_for", "read_search"]

_SENTINEL = "\x00idemclient-lookup\x00"
#: the methods the server takes keys on (it creates with POST only)
_KEYED_METHODS = frozenset({"POST"})


class InFlight(enum.Enum):
    """What a second request does while the first with its key still runs."""

    #: answer "still running" (the profile's `in_progress`)
    ANSWER = "answer"
    #: no guard: the second request runs too (another payment)
    RUN = "run"
    #: "already done, here is the resource" once the resource exists (GoCardless)
    EXISTING = "existing"


class Mismatch(enum.Enum):
    """What the same key with another request gets."""

    #: answer "same key, other request" (the profile's `mismatch`, or the provider's)
    ANSWER = "answer"
    #: the server keys by the key alone: the first request's answer
    REPLAY = "replay"
    #: "already done, here is the resource" (GoCardless)
    EXISTING = "existing"
    #: the record is keyed by the request too: the other request is a new one
    #: (django-idempotency-key)
    RUN = "run"


@dataclass(frozen=True, slots=True)
class Route:
    """A collection the payment resource is served under: `POST path` creates one of
    `kind` ("payment" or "payout"), `GET path/{id}` reads it. `path` is a regular
    expression matched against the whole path."""

    path: str
    kind: str

    def collection(self, path: str) -> bool:
        return re.fullmatch(self.path, path) is not None

    def item(self, path: str) -> str | None:
        found = re.fullmatch(self.path + r"/([^/]+)", path)
        return None if found is None else found.group(1)


DEFAULT_ROUTES = (Route(r"/v1/payments", "payment"), Route(r"/v1/payouts", "payout"))


@dataclass(frozen=True, slots=True)
class _Family:
    """What a built-in profile's provider does that the profile's fields do not say."""

    #: extra collections, beside /v1/payments and /v1/payouts
    routes: tuple[Route, ...] = ()
    #: paths (regular expressions) where a keyed POST without a key is refused; None:
    #: every path (the reference server's rule); (): nowhere (the request runs unkeyed)
    required: tuple[str, ...] | None = ()
    #: only 2xx answers are stored; another final answer leaves the key unused
    only_2xx: bool = False
    #: paths (regular expressions) whose POSTs are challenged until signed
    challenged: tuple[str, ...] = ()
    #: None: from the fields; else the provider's reading of a mismatch
    mismatch: Mismatch | None = None


_FAMILIES: Mapping[str, _Family] = {
    "reference": _Family(required=None),
    "generic": _Family(required=None),
    "ietf": _Family(required=None),
    "stripe": _Family(
        routes=(
            Route(r"/v1/payment_intents", "payment"),
            Route(r"/v2/money_management/outbound_payments", "payout"),
        )
    ),
    "adyen": _Family(routes=(Route(r"/v71/payments", "payment"),)),
    "paypal": _Family(
        routes=(Route(r"/v2/checkout/orders", "payment"), Route(r"/v1/payments/payouts", "payout"))
    ),
    "square": _Family(
        routes=(Route(r"/v2/payments", "payment"), Route(r"/v2/orders", "payment")),
        # CreatePayment requires its idempotency_key; CreateOrder does not.
        required=(r"/v2/payments", r"/v1/payments", r"/v1/payouts"),
    ),
    "gocardless": _Family(mismatch=Mismatch.EXISTING),
    "checkout": _Family(routes=(Route(r"/payments", "payment"),), only_2xx=True),
    "wise": _Family(
        routes=(
            Route(r"/v1/transfers", "payout"),
            Route(r"/v1/profiles/[^/]+/balance-movements", "payout"),
        ),
        required=None,
        challenged=(r".*/balance-movements",),
    ),
    "mollie": _Family(routes=(Route(r"/v2/payments", "payment"),), mismatch=Mismatch.ANSWER),
    "razorpay": _Family(
        routes=(Route(r"/v1/transfers", "payout"),),
        required=(r"/v1/payouts",),
        mismatch=Mismatch.ANSWER,
    ),
    "django-idempotency-key": _Family(only_2xx=True, mismatch=Mismatch.RUN),
    "drf-idempotency-key": _Family(),
}
#: A profile of your own: the reference server's own rules where its fields say nothing.
_OWN = _Family(required=None)


# -- the providers' bodies -------------------------------------------------------------
# Each returns (content type, body, extra headers) for one answer. Written from each
# provider's published error shape; the messages are this server's own words.

Body = tuple[str, Any, tuple[tuple[str, str], ...]]


def _stripe_in_progress(resource_id: str | None, path: str) -> tuple[int, Body]:
    error = {
        "type": "idempotency_error",
        "code": "idempotency_key_in_use",
        "message": "A request with this idempotency key is still being processed; retry later.",
    }
    return 409, (JSON_CONTENT_TYPE, {"error": error}, ())


def _stripe_mismatch() -> Body:
    error = {
        "type": "idempotency_error",
        "message": "This idempotency key was already used with other request parameters.",
    }
    return JSON_CONTENT_TYPE, {"error": error}, ()


def _adyen_in_progress(resource_id: str | None, path: str) -> tuple[int, Body]:
    body = {
        "status": 422,
        "errorCode": "704",
        "message": "request already processed or in progress",
        "errorType": "validation",
    }
    return 422, (JSON_CONTENT_TYPE, body, (("transient-error", "true"),))


def _mollie(status: int, title: str, detail: str) -> Body:
    body = {"status": status, "title": title, "detail": detail}
    return "application/hal+json", body, ()


def _checkout_in_progress(resource_id: str | None, path: str) -> tuple[int, Body]:
    return 409, (JSON_CONTENT_TYPE, None, ())


def _square_mismatch() -> Body:
    error = {
        "category": "INVALID_REQUEST_ERROR",
        "code": "IDEMPOTENCY_KEY_REUSED",
        "detail": "This idempotency key was already used with another request.",
    }
    return JSON_CONTENT_TYPE, {"errors": [error]}, ()


def _razorpay_error(code: str, description: str, reason: str = "NA") -> Body:
    error = {
        "code": code,
        "description": description,
        "source": "NA",
        "step": "NA",
        "reason": reason,
        "metadata": {},
    }
    return JSON_CONTENT_TYPE, {"error": error}, ()


def _razorpay_mismatch() -> Body:
    return _razorpay_error(
        "BAD_REQUEST_ERROR", "This idempotency key was already used with another request."
    )


def _razorpay_in_progress(resource_id: str | None, path: str) -> tuple[int, Body]:
    running = "A request with this idempotency key is still being processed."
    if re.fullmatch(r".*/transfers", path):
        return 409, _razorpay_error("BAD_REQUEST_ERROR", running)
    # Payouts: a 500 whose reason says the key is in use.
    return 500, _razorpay_error("SERVER_ERROR", running, "idempotency_key_in_use")


def _gocardless_existing(resource_id: str) -> Body:
    message = "A resource has already been created with this idempotency key"
    error = {
        "type": "invalid_state",
        "code": 409,
        "message": message,
        "errors": [
            {
                "reason": "idempotent_creation_conflict",
                "message": message,
                "links": {"conflicting_resource_id": resource_id},
            }
        ],
    }
    return JSON_CONTENT_TYPE, {"error": error}, ()


def _detail(text: str) -> Body:
    return JSON_CONTENT_TYPE, {"detail": text}, ()


def _wise_challenge(path: str) -> Body:
    body = {
        "status": 403,
        "error": "Forbidden",
        "message": "This request needs a signed one-time token (strong customer authentication).",
        "path": path,
    }
    return JSON_CONTENT_TYPE, body, ()


_IN_PROGRESS: Mapping[str, Callable[[str | None, str], tuple[int, Body]]] = {
    "stripe": _stripe_in_progress,
    "adyen": _adyen_in_progress,
    "mollie": lambda _, __: (
        409,
        _mollie(409, "Conflict", "A request with this idempotency key is still being processed."),
    ),
    "checkout": _checkout_in_progress,
    "razorpay": _razorpay_in_progress,
    "drf-idempotency-key": lambda _, __: (409, _detail("Request in progress")),
}
_MISMATCH: Mapping[str, Callable[[], Body]] = {
    "stripe": _stripe_mismatch,
    "square": _square_mismatch,
    "mollie": lambda: _mollie(
        400, "Bad Request", "This idempotency key was already used with another request."
    ),
    "razorpay": _razorpay_mismatch,
    "drf-idempotency-key": lambda: _detail("Parameter mismatch"),
}


def _at(path: str, value: Any) -> Any:
    """A JSON document with `value` at the dotted `path` (``*``: a one-item list)."""
    for part in reversed(path.split(".")):
        value = [value] if part == "*" else {part: value}
    return value


def _merge(first: Any, second: Any) -> Any:
    """Two documents made by `_at` as one: objects merged by name, one-item lists item
    by item (so a code and an id under the same list item stay together)."""
    if isinstance(first, dict) and isinstance(second, dict):
        merged = dict(first)
        for name, value in second.items():
            merged[name] = _merge(first[name], value) if name in first else value
        return merged
    if isinstance(first, list) and isinstance(second, list) and len(first) == len(second) == 1:
        return [_merge(first[0], second[0])]
    return second


def _from_match(match: Match, code_paths: Sequence[str], detail: str) -> Body:
    """An answer a profile's own classifier reads as `match`: for a profile of your own."""
    headers: tuple[tuple[str, str], ...] = ()
    if match.header is not None:
        name, value = match.header
        headers = ((name.lower(), "true" if value == "*" else value),)
    if match.codes and code_paths:
        body = _at(code_paths[0], sorted(match.codes)[0])
        if isinstance(body, dict):
            body.setdefault("detail", detail)
        return JSON_CONTENT_TYPE, body, headers
    return JSON_CONTENT_TYPE, {"detail": detail}, headers


def _render(status: int, body: Body) -> ServerResponse:
    content_type, value, headers = body
    if value is None:
        return ServerResponse(status, headers)
    return ServerResponse(status, (("content-type", content_type), *headers), json_bytes(value))


def _bad_key(header: str, detail: str) -> Problem:
    return Problem(400, "invalid-idempotency-key", f"Invalid {header}", detail)


@dataclass(frozen=True, slots=True)
class KeyRead:
    """The key a request carries (None: none) and its body without a body-field key."""

    key: str | None
    body: bytes


class Dialect:
    """One profile as the reference server speaks it. Immutable after construction."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.name = profile.name
        builtin = _builtins.BUILTIN.get(profile.name)
        #: the built-in this profile is (None: a profile of your own)
        self.family = profile.name if builtin == profile else None
        self._family = _FAMILIES.get(self.family or "", _OWN)
        self.routes = (*DEFAULT_ROUTES, *self._family.routes)
        self.in_flight = self._in_flight_mode()
        self.mismatch_mode = self._mismatch_mode()
        #: keys are forgotten on arrival once older than their retention; the
        #: reference profile leaves forgetting to the reaper (`key_ttl`), as it always has
        self.forgets_on_arrival = self.family != "reference"

    # -- what the profile's fields say -----------------------------------------------

    def _in_flight_mode(self) -> InFlight:
        if self.profile.existing is not None:
            return InFlight.EXISTING
        if not self.profile.guards_in_flight:
            return InFlight.RUN
        return InFlight.ANSWER

    def _mismatch_mode(self) -> Mismatch:
        if self._family.mismatch is not None:
            return self._family.mismatch
        if self.profile.existing is not None:
            return Mismatch.EXISTING
        if self.profile.mismatch:
            return Mismatch.ANSWER
        if self.profile.replay is not None:
            return Mismatch.RUN
        return Mismatch.REPLAY

    @property
    def longest_retention(self) -> float:
        """The longest any endpoint keeps a key: the reaper's default TTL."""
        found = [self.profile.key_retention]
        found += [e.key_retention for e in self.profile.endpoints if e.key_retention]
        return max(found)

    def _resolve(self, method: str, path: str) -> Resolved:
        return self.profile.resolve(method, path, _KEYED_METHODS)

    def retention(self, method: str, path: str) -> float:
        return self._resolve(method, path).key_retention

    def stores(self, status: int) -> bool:
        """Whether a final answer with `status` is kept for the key."""
        if status in self.profile.unstored:
            return False
        only_2xx = self._family.only_2xx or (
            self.family is None and self.profile.replay is not None
        )
        return not only_2xx or 200 <= status < 300

    def records_by_request(self) -> bool:
        """The record is keyed by the key and the request (django-idempotency-key)."""
        return self.mismatch_mode is Mismatch.RUN

    # -- routes ----------------------------------------------------------------------

    def collection(self, path: str) -> str | None:
        """The kind a POST to `path` creates, or None."""
        for route in self.routes:
            if route.collection(path):
                return route.kind
        return None

    def item(self, path: str) -> tuple[str, str] | None:
        """(kind, id) for a resource's own path, or None."""
        for route in self.routes:
            found = route.item(path)
            if found is not None:
                return route.kind, found
        return None

    def kind_of(self, endpoint: str) -> str:
        kind = self.collection(endpoint)
        if kind is None:
            raise ValueError(f"{endpoint!r} is not a collection this server serves")
        return kind

    # -- the key -----------------------------------------------------------------------

    def requires_key(self, path: str) -> bool:
        required = self._family.required
        if required is None:
            return True
        return any(re.fullmatch(pattern, path) for pattern in required)

    def read_key(self, request: ServerRequest) -> KeyRead:
        """The key where the profile puts it, checked against its format (a 400
        `Problem` otherwise), and the body without it when it is a body field."""
        resolved = self._resolve(request.method, request.path)
        slot = resolved.key
        if not resolved.keyed:
            return KeyRead(None, request.body)
        if self.family == "reference":
            values = request.header_values("idempotency-key")
            if not values and not self.requires_key(request.path):
                return KeyRead(None, request.body)
            return KeyRead(parse_idempotency_key(values), request.body)
        if slot.header is not None:
            values = request.header_values(slot.header.lower())
            if not values:
                return KeyRead(None, request.body)
            if len(values) > 1:
                raise _bad_key(slot.header, f"send exactly one {slot.header} header")
            raw = values[0].strip(" \t")
            body = request.body
        else:
            assert slot.field is not None
            document = _json_object(request.body)
            if document is None or slot.field not in document:
                return KeyRead(None, request.body)
            # Before the body is written again without its key: a lone surrogate in it
            # could not be, and is answered as the payment's own parser answers it.
            check_storable(document, request.body)
            raw = document.pop(slot.field)
            if not isinstance(raw, str):
                raise _bad_key(slot.field, f"the body field {slot.field!r} must be a string")
            body = json_bytes(document)
        try:
            key = slot.key_from_header(raw) if slot.header is not None else raw
            return KeyRead(resolved.check_key(key), body)
        except InvalidKey as exc:
            where = slot.header or slot.field or "key"
            raise _bad_key(where, f"{where}: {exc}") from None

    def missing_key(self, path: str) -> Problem:
        slot = self._resolve("POST", path).key
        where = f"the {slot.header} header" if slot.header else f"the body field {slot.field!r}"
        return _bad_key(slot.header or slot.field or "key", f"{where} is required on this request")

    def key_hint(self, request: ServerRequest) -> str | None:
        """The key as sent, for matching fault scripts (validation happens later)."""
        slot = self._resolve(request.method, request.path).key
        if slot.header is None:
            document = _json_object(request.body)
            value = None if document is None else document.get(slot.field or "")
            return value if isinstance(value, str) else None
        raw = request.header(slot.header.lower())
        if raw is None:
            return None
        raw = raw.strip(" \t")
        return raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw

    # -- the answers ---------------------------------------------------------------------

    def in_progress(
        self, resource_id: str | None, path: str, reference: ServerResponse
    ) -> ServerResponse:
        """ "Still running" for a request to `path`: the provider's answer
        (`reference`: the reference server's)."""
        profile = self.profile
        if self.family in ("reference", "generic", "ietf") or not profile.in_progress:
            return reference
        builder = _IN_PROGRESS.get(self.family or "")
        if builder is not None:
            return _render(*builder(resource_id, path))
        match = profile.in_progress[0]
        body = _from_match(match, profile.code_paths, "request in progress")
        return _render(min(match.statuses), body)

    def mismatch(self, reference: ServerResponse) -> ServerResponse:
        """ "Same key, other request": the provider's answer."""
        profile = self.profile
        builder = _MISMATCH.get(self.family or "")
        if self.family in ("reference", "generic", "ietf"):
            return reference
        if builder is not None:
            status = min(profile.mismatch[0].statuses) if profile.mismatch else 400
            return _render(status, builder())
        if profile.mismatch:
            match = profile.mismatch[0]
            body = _from_match(match, profile.code_paths, "idempotency key reused")
            return _render(min(match.statuses), body)
        return reference

    def existing(self, resource_id: str) -> ServerResponse:
        """ "Already done, here is the resource" (GoCardless): the id, no replay."""
        existing = self.profile.existing
        assert existing is not None
        status = min(existing.match.statuses)
        if self.family == "gocardless":
            return _render(status, _gocardless_existing(resource_id))
        content_type, value, headers = _from_match(
            existing.match, self.profile.code_paths, "already created"
        )
        value = _merge(value, _at(existing.id_path, resource_id))
        return _render(status, (content_type, value, headers))

    def replay(
        self, status: int, body: bytes, headers: Sequence[tuple[str, str]]
    ) -> ServerResponse:
        """The stored answer given again: its status (or the profile's replay status),
        its body byte for byte, and the profile's replay marker, if any."""
        marker = self.profile.replay_marker
        replay = self.profile.replay
        if replay is not None:
            status = min(replay.statuses)
        extra = () if marker is None else ((marker[0].lower(), marker[1]),)
        return ServerResponse(status, (*headers, *extra), body)

    def challenge(self, request: ServerRequest) -> ServerResponse | None:
        """Wise's strong customer authentication: 403 with a one-time token in
        `x-2fa-approval` until the request comes again with an `X-Signature` header
        (the signature is not verified: any non-empty value passes)."""
        match = self.profile.challenge
        if match is None or request.method != "POST":
            return None
        patterns = self._family.challenged if self.family is not None else (r".*",)
        if not any(re.fullmatch(p, request.path) for p in patterns):
            return None
        if (request.header("x-signature") or "").strip():
            return None
        token = secrets.token_hex(16)
        if self.family == "wise":
            content_type, value, headers = _wise_challenge(request.path)
        else:
            content_type, value, headers = _from_match(match, (), "sign this request")
        name = match.header[0].lower() if match.header is not None else "x-2fa-approval"
        headers = (*(h for h in headers if h[0] != name), (name, token))
        return _render(min(match.statuses), (content_type, value, headers))

    # -- the look-up -------------------------------------------------------------------

    def read_lookup(self, request: ServerRequest) -> tuple[str | None, str | None] | Search | None:
        """(reference, key) asked for by a request to the look-up, or None if it is not
        one. `{reference}` and `{key}` are read from where the template puts them: in
        the path (one segment), or in a query parameter's value (matched by name). A
        template that puts them inside a search query's quotes (Stripe's) is answered
        as that search: the query is parsed as the provider would (`read_search`), so
        what a client fills in reads as what the provider would read."""
        lookup = self.profile.lookup
        if lookup is None or request.method != "GET":
            return None
        path, _, query = lookup.template.partition("?")
        if path.startswith("{path}") or self.collection(path) is not None:
            return None  # a collection's own search answers it
        found: dict[str, str] = {}
        in_path = _slots(path, "[^/]+").fullmatch(request.path)
        if in_path is None:
            return None
        found.update({k: unquote(v) for k, v in in_path.groupdict().items()})
        asked = dict(parse_qsl(request.query, keep_blank_values=True))
        searched = (lookup.quoting or quoting_of(lookup.template)) == "search"
        for name, value in parse_qsl(_marked(query), keep_blank_values=True):
            if name not in asked:
                return None
            if searched and _SENTINEL in value:
                return read_search(asked[name])
            matched = _slots(value, ".+", marked=True).fullmatch(asked[name])
            if matched is None:
                return None
            found.update(matched.groupdict())
        return found.get("r"), found.get("k")

    def lookup_status(self, status: str) -> str:
        """A resource's status in the look-up's words (Stripe: `canceled` for declined)."""
        lookup = self.profile.lookup
        if lookup is None:
            return status
        if status == "succeeded" and status not in lookup.succeeded and lookup.succeeded:
            return sorted(lookup.succeeded)[0]
        if status == "declined" and status not in lookup.failed and lookup.failed:
            return sorted(lookup.failed)[0]
        return status

    def __repr__(self) -> str:
        return f"Dialect({self.name!r})"


@dataclass(frozen=True, slots=True)
class Search:
    """A search query as the provider reads it (the part the reference server
    answers): clauses of (field, value), all of which (`any_of` False) or any of which
    must hold. Fields: ``reference`` (``metadata['reference']``) and ``status``."""

    clauses: tuple[tuple[str, str], ...]
    any_of: bool = False


_SEARCH_FIELDS = {
    "metadata['reference']": "reference",
    'metadata["reference"]': "reference",
    "status": "status",
}
_FIELD = re.compile(r"""[A-Za-z_][A-Za-z0-9_.]*(?:\[(?:'[^'\]]*'|"[^"\]]*")\])?""")


def read_search(query: str) -> Search:
    """`query` read as Stripe's search query language reads it: clauses
    ``field:'value'`` (or ``"value"``, or a bare word), where a backslash escapes the
    next character inside quotes, joined by spaces or ``AND``, or by ``OR`` (not both).
    Raises `Problem` (400) for a query it cannot read, as the provider refuses one."""
    clauses: list[tuple[str, str]] = []
    joins: set[str] = set()
    at, size = 0, len(query)

    def invalid(why: str) -> Problem:
        return Problem(400, "invalid-search-query", "Invalid search query", why)

    while True:
        while at < size and query[at].isspace():
            at += 1
        if at >= size:
            break
        if clauses:
            word = re.match(r"(AND|OR)(?=\s)", query[at:], re.IGNORECASE)
            if word is not None:
                joins.add(word.group(1).upper())
                at += word.end()
                while at < size and query[at].isspace():
                    at += 1
        field = _FIELD.match(query, at)
        if field is None or not query.startswith(":", field.end()):
            raise invalid(f"expected field:value at character {at}")
        name = _SEARCH_FIELDS.get(field.group())
        if name is None:
            raise invalid(f"the field {field.group()!r} is not searchable here")
        at = field.end() + 1
        if at < size and query[at] in "'\"":
            closing, value, at = query[at], [], at + 1
            while True:
                if at >= size:
                    raise invalid("a quoted value is not closed")
                char = query[at]
                if char == "\\":
                    if at + 1 >= size:
                        raise invalid("a backslash ends the query")
                    value.append(query[at + 1])
                    at += 2
                    continue
                at += 1
                if char == closing:
                    break
                value.append(char)
            text = "".join(value)
            if at < size and not query[at].isspace():
                raise invalid(f"unexpected {query[at]!r} after a quoted value")
        else:
            bare = re.match(r"[^\s'\"]+", query[at:])
            if bare is None:
                raise invalid(f"expected a value at character {at}")
            text, at = bare.group(), at + bare.end()
        clauses.append((name, text))
    if not clauses:
        raise invalid("an empty query")
    if len(joins) > 1:
        raise invalid("AND and OR cannot be combined in one query")
    return Search(tuple(clauses), any_of=joins == {"OR"})


def dialect_for(profile: str | Profile | None) -> Dialect:
    """The dialect of a built-in's name, a `Profile`, or None (the reference server's)."""
    return Dialect(_builtins.named(profile if profile is not None else "reference"))


def _marked(template: str) -> str:
    return template.replace("{reference}", _SENTINEL + "r").replace("{key}", _SENTINEL + "k")


def _slots(template: str, slot: str, *, marked: bool = False) -> re.Pattern[str]:
    """A pattern matching `template` with `{reference}` as group `r`, `{key}` as `k`."""
    pattern = re.escape(template if marked else _marked(template))
    for name in ("r", "k"):
        pattern = pattern.replace(re.escape(_SENTINEL + name), f"(?P<{name}>{slot})", 1)
    return re.compile(pattern, re.DOTALL)


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a field name twice in one object")
    return value


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None (the payment's own parser says why)."""
    try:
        value = json.loads(body, object_pairs_hook=_no_twice)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
