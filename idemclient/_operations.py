"""What the client offers its own features (the batch, the outbox): operations, and one
way to run a step in either world.

Operations:

- `intent_ahead` registers nothing and sends nothing: it is the intent the transport
  will record for a request, built as the transport builds it, for a caller that
  records operations ahead of sending them (the outbox, in the application's
  transaction; the batch uses `intent_for` and `fingerprint` on its own template);
- `send_registered` sends one recorded operation again, with its key, and gives back
  what it came to (`Sent`) without raising for any outcome state; `settle` turns that
  into what `Client.request` returns or raises;
- `from_record` is the one way to make an `Outcome` from a stored record;
- `intent_for`, `fingerprint`, `fingerprints`, `same`, `CLOCK_SKEW` and
  `within_retention` are how the transport sees a request and the store's clock, for
  the batch's plan to see them the same way.

Steps: a step of a client (a resume, the batch's phases) is a generator of effects,
done by `run` in the calling thread or `arun` awaiting (`_steps`; named here too, for
the features that send through this module).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from ._effects import Blocking, Close, Each, Feed, Http, Pause
from ._errors import AnswerNotKept, KeyConflict, MissingKey, OutcomeError, RequestNotReplayable
from ._fingerprint import Fingerprints, fingerprint, fingerprints, same
from ._frozen import fast_constructor
from ._hooks import Hooks
from ._intent import KEY_HEADER, buffered_body, check_unread_key_header, intent_for
from ._keys import key_from_identity, new_key, one_key, validate_key
from ._outcome import Outcome, State, from_record, outcome_of
from ._profile import KeySlot, Profile, Resolved
from ._redaction import looks_secret
from ._retrofit import transport_of
from ._settings import Settings
from ._steps import Op, arun, run
from ._store import Intent, OperationRecord
from ._telling import unsettled_error
from ._time import CLOCK_SKEW, within_retention
from ._transport import AsyncIdempotentTransport, IdempotentTransport, call_extensions

__all__ = [
    "CLOCK_SKEW",
    "Blocking",
    "Close",
    "Each",
    "Feed",
    "Fingerprints",
    "Http",
    "Op",
    "Pause",
    "Sent",
    "arun",
    "fingerprint",
    "fingerprints",
    "from_record",
    "intent_ahead",
    "intent_for",
    "key_in_json",
    "new_sent",
    "profile_for",
    "request_options",
    "run",
    "same",
    "send_registered",
    "sent_by",
    "sent_headers",
    "sent_of",
    "settings_of",
    "settle",
    "target_url",
    "within_retention",
]

T = TypeVar("T")


# -- operations ---------------------------------------------------------------------------

#: Where the generic profile's server reads the key.
GENERIC_SLOT = KeySlot()


def settings_of(client: httpx.Client | httpx.AsyncClient) -> Settings:
    """The settings of a client wrapped by `wrap()` (or a `Client`'s `http`)."""
    transport = transport_of(client)
    if not isinstance(transport, IdempotentTransport | AsyncIdempotentTransport):
        raise TypeError("this httpx client is not wrapped by idemclient.wrap()")
    return transport.settings


def target_url(client: httpx.Client | httpx.AsyncClient, url: httpx.URL | str) -> httpx.URL:
    """Where a request to `url` goes: a relative URL joined to the client's base URL,
    as httpx joins it (the base URL's path, then the URL's, one slash between).

    Parsing a URL costs a tenth of what the client adds to a request, and most requests
    go to a few paths: a target given as text is kept, by the base URL it was joined to
    (the very object: a client whose base URL is set again finds nothing kept)."""
    base = client.base_url
    if isinstance(url, str):
        kept = _TARGETS.get((id(base), url))
        if kept is not None and kept[0] is base:
            return kept[1]
    merged = httpx.URL(url)
    target = (
        base.copy_with(raw_path=base.raw_path + merged.raw_path.lstrip(b"/"))
        if merged.is_relative_url
        else merged
    )
    if isinstance(url, str):
        if len(_TARGETS) >= _TARGETS_KEPT:  # paths with ids in them are endless
            _TARGETS.clear()
        _TARGETS[(id(base), url)] = (base, target)
    return target


#: `target_url`'s targets given as text, by their base URL's id and the text.
_TARGETS: dict[tuple[int, str], tuple[httpx.URL, httpx.URL]] = {}
_TARGETS_KEPT = 1024


def profile_for(
    client: httpx.Client | httpx.AsyncClient, method: str, url: httpx.URL | str
) -> Profile:
    """The profile a wrapped client's request with `method` to `url` speaks: the one
    the client chose, else its host's provider's, else the default. `ProfileMismatch`
    where the chosen one contradicts the provider of that host (see `_hosts`)."""
    return settings_of(client).resolve_url(method, target_url(client, url)).profile


def request_options(
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    headers: Any,
    extensions: Any,
    slot: KeySlot = GENERIC_SLOT,
    defaults: httpx.Headers | None = None,
) -> tuple[httpx.Headers | None, dict[str, Any], str | None]:
    """Per-call options to the headers and extensions the transport reads, and the key
    the caller chose (by key= or identity=), if any. A key that goes in a header (`slot`)
    is put there; one that goes in the body is the caller's to put (see `key_in_json`).

    A key given twice for one request (key= or identity=, the key header, given twice,
    or `defaults`, the client's default headers, where the call gives one too) must be
    one key: two different ones are refused (`InvalidKey`) before anything is recorded.
    The headers are None when the call gives none and no key: httpx sends the client's
    (and the transport puts the operation's key in its place)."""
    if key is None and identity is None and headers is None:
        # Most calls: no key given anywhere of the call's, nothing to check or put in.
        extended = call_extensions(
            extensions, operation_id=operation_id, reference=reference, hooks=hooks
        )
        return None, extended, None
    if key is not None and identity is not None:
        raise ValueError("pass key= or identity=, not both: an identity is a way to make a key")
    chosen: str | None = None
    places: list[tuple[str, str]] = []  # where a key is given, and which
    if key is not None:
        chosen = key
        places.append(("key=", key))
    elif identity is not None:
        parts = (identity,) if isinstance(identity, str) else tuple(identity)
        chosen = key_from_identity(*parts)
        places.append(("identity=", chosen))
    try:
        merged = httpx.Headers(headers)
    except UnicodeEncodeError:
        # httpx refuses a non-ASCII header value; when it is the key, say so as for any
        # other invalid key (validate_key raises InvalidKey naming the character).
        given = _raw_key(headers, slot.header or KEY_HEADER)
        if given is not None:
            validate_key(given)
        raise
    if chosen is not None:
        validate_key(chosen)
    if slot.header is not None:
        where = f"the {slot.header} header"
        places += [(where, slot.key_from_header(v)) for v in merged.get_list(slot.header)]
        if places and defaults is not None:
            # The client's own headers would be overridden by the call's, silently.
            where = f"the client's default headers ({slot.header})"
            places += [(where, slot.key_from_header(v)) for v in defaults.get_list(slot.header)]
        one = one_key(places)
        if one is not None:
            merged[slot.header] = slot.header_value(validate_key(one))
    extended = call_extensions(
        extensions, operation_id=operation_id, reference=reference, hooks=hooks
    )
    return merged, extended, chosen


def sent_headers(
    client: httpx.Client | httpx.AsyncClient, headers: httpx.Headers | None
) -> httpx.Headers:
    """The headers a request with `headers` will carry: the client's, those of the
    call in their place (as httpx merges them)."""
    merged = client.headers.copy()
    merged.update(headers)
    return merged


def key_in_json(
    resolved: Resolved,
    key: str | None,
    known: str | None,
    request: dict[str, Any],
    *,
    source: str = "key=",
    headers: httpx.Headers | None = None,
) -> dict[str, Any]:
    """httpx's request arguments with the key in the JSON body field the profile's
    server reads it from: the caller's own field if set (it is the key), else `key`
    (key= or identity=, as `source` says), else the operation's recorded key (`known`),
    else a new one. Refused, before anything is recorded, for a body that is not a JSON
    object, for a body field and `key` that are two different keys, and for a key in
    the `Idempotency-Key` header among `headers` (the request's, as httpx will merge
    them) that is not the key given here or none is (`check_unread_key_header`)."""
    field = resolved.key.field
    assert field is not None
    body = request.get("json")
    if any(request.get(name) is not None for name in ("content", "data", "files")) or not (
        isinstance(body, Mapping)
    ):
        raise MissingKey(
            None,
            f"the {resolved.profile.name} profile's server reads the key from the"
            f" {resolved.key.where}: send the body as json= (a JSON object); nothing was"
            " recorded or sent",
        )
    own = body.get(field)
    if headers is not None:
        given = [] if key is None else [(source, key)]
        if isinstance(own, str):
            given.append((f"the body's {field!r}", own))
        check_unread_key_header(resolved, headers, given)
    if own is not None:
        if key is not None:
            one_key([(source, key), (f"the body's {field!r}", own)])
        return request
    chosen = key or known or new_key()
    return {**request, "json": {**body, field: resolved.check_key(chosen)}}


def _raw_key(headers: Any, header: str) -> object:
    """The key header among headers as the caller gave them, or None."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs or ():
        text = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if text.lower() == header.lower():
            return value
    return None


def check_method(
    settings: Settings,
    method: str,
    *,
    then: str,
    refused: str = "is not an operation under this client's policy",
    profile: Profile | None = None,
) -> str:
    """`method`, upper-cased, if the policy sends it as an operation (under `profile`,
    the one the request's host speaks; the client's own by default); else a ValueError
    that says it is `refused`, and ends with `then` (what the caller should do)."""
    method = method.upper()
    methods = settings.methods if profile is None else settings.methods_of(profile)
    if method not in methods:
        allowed = ", ".join(sorted(methods))
        raise ValueError(f"{method} {refused} (methods: {allowed}){then}")
    return method


def intent_ahead(
    client: httpx.Client | httpx.AsyncClient, method: str, url: httpx.URL | str, **request: Any
) -> Intent:
    """The intent a wrapped `client` would record for this request, built as its
    transport builds it (so the fingerprints agree when it is sent); nothing is recorded
    or sent. For a caller that records operations ahead of sending them. `request` is
    what `Client.request` takes but `hooks` and `extensions`: `key`, `operation_id`,
    `identity`, `reference`, `headers`, and httpx's `json`, `content`, `params`..."""
    key, operation_id, identity, reference, headers = (request.pop(name, None) for name in _AHEAD)
    settings = settings_of(client)
    target = client.build_request(method, url)
    method = check_method(
        settings,
        method,
        refused="is not sent as an operation by this client's policy",
        then="; there is nothing to record",
        profile=settings.profile_at(target.url),
    )
    resolved = settings.resolve(target)
    if not resolved.keyed:
        raise ValueError(
            f"the {resolved.profile.name} profile's server takes no idempotency key at"
            f" {method} {target.url.path}: it cannot be recorded as an operation"
        )
    merged, extended, chosen = request_options(
        key, operation_id, identity, reference, None, headers, None, resolved.key
    )
    if resolved.key.field is not None:
        known = None
        if operation_id is not None and chosen is None:
            records = settings.store.find(operation_ids=[operation_id])
            known = records[0].key if records else None
        source = "identity=" if identity is not None else "key="
        request = key_in_json(
            resolved, chosen, known, request, source=source, headers=sent_headers(client, merged)
        )
    built = client.build_request(method, url, headers=merged, extensions=extended, **request)
    body = buffered_body(built, settings.max_request_body)
    if body is None:
        raise RequestNotReplayable(
            "a streamed request body cannot be recorded for later: pass it as bytes,"
            " json=, data= or files= so that it can be stored and sent after the commit"
        )
    return intent_for(built, body, resolved)


#: What `intent_ahead` takes beside httpx's own arguments.
_AHEAD = ("key", "operation_id", "identity", "reference", "headers")


@dataclass(frozen=True, slots=True)
class Sent:
    """What sending an operation came to, whatever its state: `error` is what the
    transport raised for an operation with no final answer (its `outcome` is `outcome`),
    `response` the final answer httpx returned (None when the store answered without
    its body, or on an error). `outcome` is None only for a request that was not an
    operation (a method the policy leaves out)."""

    outcome: Outcome | None
    error: OutcomeError | None = None
    response: httpx.Response | None = None


#: `Sent(...)` without a call per field (see `_frozen`): one per operation.
new_sent = fast_constructor(Sent)


def sent_of(response: httpx.Response) -> Sent:
    """What the response httpx gave back for an operation came to. One whose outcome is
    not finished (a 401 no auth flow sent on, a redirect not followed) went back to
    httpx and ended there: not an answer to read, its caller closes it the way its
    client closes."""
    return new_sent(outcome_of(response), response=response)


def sent_by(call: Http) -> Op[Sent]:
    """Do `call` (an operation's send or request) and say what it came to, without
    raising for any outcome state."""
    try:
        response = yield call
    except OutcomeError as exc:
        return new_sent(exc.outcome, exc)
    except AnswerNotKept as exc:  # finished, its body not kept: the outcome says so
        return new_sent(exc.outcome)
    sent = sent_of(response)
    if sent.outcome is not None and not sent.outcome.state.finished:
        yield Close(response)
    return sent


def request_for(
    client: httpx.Client | httpx.AsyncClient,
    operation: Intent | OperationRecord,
    hooks: Hooks | None = None,
) -> httpx.Request:
    """The request that sends a recorded operation: its stored URL, headers and body, and
    what the store never kept (credentials, withheld headers, secret query values) from
    the live client. Whatever the live client lacks, the store refuses before sending."""
    headers = httpx.Headers(list(operation.headers))
    url = _with_live_secrets(httpx.URL(operation.url), client.params)
    resolved = settings_of(client).resolve(client.build_request(operation.method, url))
    if not resolved.keyed:
        # This client would pass it through as a plain request: no key where its server
        # reads one, no record of the attempt, and so sent again at every resume.
        raise ValueError(
            f"this client's {resolved.profile.name} profile and policy send"
            f" {operation.method} {url.path} as a plain request, without a key or a record;"
            " it was recorded as an operation, so it is not sent by this client"
        )
    slot = resolved.key
    if slot.header is not None:
        # The body of a key kept in the body holds it already, as it was recorded.
        headers[slot.header] = slot.header_value(operation.key)
    request = client.build_request(
        operation.method,
        url,
        headers=headers,
        content=operation.body,
        extensions=call_extensions(
            None, operation_id=operation.operation_id, reference=operation.reference, hooks=hooks
        ),
    )
    # The stored URL exactly: a client with params= would replace its whole query
    # (httpx 0.28 merges the client's params over the URL's, dropping the rest).
    request.url = url
    return request


def _with_live_secrets(url: httpx.URL, live: httpx.QueryParams) -> httpx.URL:
    """`url` with each secret query parameter the store kept without its value given
    the live client's value, in its place. One the live client lacks stays empty: an
    empty secret parameter counts as missing, and the store refuses to send it."""
    pairs = url.params.multi_items()
    if not any(looks_secret(name) and not value for name, value in pairs):
        return url
    filled = [
        (name, live.get(name, "") if looks_secret(name) and not value else value)
        for name, value in pairs
    ]
    return url.copy_with(params=httpx.QueryParams(filled))


def send_registered(
    client: httpx.Client | httpx.AsyncClient,
    operation: Intent | OperationRecord,
    *,
    hooks: Hooks | None = None,
) -> Op[Sent]:
    """Send a recorded operation with its key (or answer it from the store, or wait for
    another sender), and say what it came to, without raising for any outcome state."""
    sent = yield from sent_by(Http("send", (request_for(client, operation, hooks),)))
    return sent


def settle(sent: Sent) -> Outcome:
    """What `Client.request` returns for `sent`, or raises: `NotSent`, `Indeterminate`
    (no final answer) or `KeyConflict`."""
    if sent.error is not None:
        raise sent.error
    response = sent.response
    if response is None:
        # Answered from the store without its body: the outcome says so, and its
        # response raises again if its body is read.
        assert sent.outcome is not None
        return sent.outcome
    outcome = sent.outcome
    if outcome is None:
        # Every request a `Client` sends is an operation, and whatever ends its exchange
        # carries the operation's outcome (see `_exchange.finish_exchange`).
        raise RuntimeError(  # pragma: no cover - a bug, not a state of the world
            f"the response (HTTP {response.status_code}) carries no idemclient outcome"
        )
    if not outcome.state.finished:
        # An answer that went back to httpx and ended the call there: a 401 that no
        # auth flow sent on, a redirect not followed (closed by `sent_by`).
        raise unsettled_error(outcome, _handed_back_reason(response.status_code))
    if outcome.state is State.FAILED and outcome.key_conflict:
        raise KeyConflict(
            f"the server refused key {outcome.key} of operation {outcome.operation_id!r}"
            f" (HTTP {response.status_code}): it holds this key for a different request."
            " This is a bug in the"
            " caller: a key must never be reused for another request.",
            outcome,
        )
    return outcome


def _handed_back_reason(status: int) -> str:
    if status in (401, 407):
        return (
            f"the server refused the credentials (HTTP {status}); fix them and send it"
            " again with the same key"
        )
    if 300 <= status < 400:
        return (
            f"the server redirected it (HTTP {status}) and the redirect was not followed"
            " (follow_redirects=False, or another origin)"
        )
    if 200 <= status < 300:
        return (
            f"it was redirected, and the answer at the new location (HTTP {status}) does"
            " not say what the payment came to"
        )
    return f"HTTP {status} is not an answer about the operation"
