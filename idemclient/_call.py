"""One call of one operation: every decision the sync and async transports share.

The transports do the I/O (store, network, sleep); this module decides. A call:

1. turns the request into an `Intent` (key, buffered body, fingerprint) before anything
   is recorded or sent;
2. after the store has recorded it and leased it to this call, checks whether it may be
   sent at all now (`gate`: key retention, the server's not-before time);
3. for each attempt, cuts the attempt's timeouts to the time left (`prepare`), then
   classifies what came back (`observe`) and decides: finish, retry after a wait, or
   stop;
4. turns where it ended into an `Outcome`, and into the error to raise when the
   operation has no final answer.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass

import httpx

from . import _time
from ._answer import AnswerWithoutBody, stored_response
from ._budget import RetryBudget
from ._classify import (
    SUCCESSES,
    AttemptKind,
    Classification,
    after_maybe_applied,
    classify_error,
    classify_response,
)
from ._clock import Clock, StepWatch
from ._errors import (
    ChallengeRequired,
    Indeterminate,
    InvalidKey,
    MissingKey,
    NotSent,
    OutcomeError,
    ReconcileRequired,
    RequestNotReplayable,
    StoreError,
)
from ._fingerprint import body_type, fingerprint
from ._hooks import (
    AttemptEndEvent,
    AttemptEvent,
    EndEvent,
    Hooks,
    RetryEvent,
    StartEvent,
    log_fields,
    logger,
)
from ._hosts import ByHost
from ._keys import new_key, one_key
from ._outcome import OUTCOME, Outcome, State, from_record
from ._policy import Decision, RetryPolicy, decide, retention_set
from ._profile import Profile, Resolved, codes_in
from ._redaction import redact_location, redact_url
from ._retry_after import parse_retry_after
from ._server_time import ServerTimes
from ._states import NEW, Event, after, stop
from ._store._base import Intent, OperationRecord, Progress
from ._store._interface import OperationStore
from ._time import (
    CLOCK_SKEW,
    LEASE_MARGIN,
    ServerTime,
    ahead,
    in_flight_until,
    lease_until,
    within_retention,
)
from .profiles import DEFAULT as DEFAULT_PROFILE

__all__ = [
    "CALL_OPTIONS",
    "CLOCK_SKEW",
    "CONTINUATION",
    "LEASE_MARGIN",
    "OUTCOME",
    "Call",
    "CallOptions",
    "Continuation",
    "Settings",
    "fingerprint",
    "in_flight_until",
    "intent_for",
    "interrupted_before_sending",
    "unsettled_error",
]

#: Request extension through which `Client` passes per-call options to the transport.
CALL_OPTIONS = "idemclient.call"
#: Request extension carrying a `Continuation` (httpx copies it into a redirect's request).
CONTINUATION = "idemclient.continuation"
KEY_HEADER = "Idempotency-Key"

#: The longest a time probe (a HEAD, see `Call.probe`) may take: a server answers one at
#: once, and one that does not must not take the time the operation needs to be sent.
PROBE_TIMEOUT = 5.0
#: ...nor more than this share of the time left before the call's deadline.
_PROBE_SHARE = 0.25
_BUSY_POLL_FIRST = 0.01
_BUSY_POLL_MAX = 0.5


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What a caller says about one operation beyond the HTTP request itself."""

    #: the caller's name for the logical operation (order id, invoice id...)
    operation_id: str | None = None
    #: the end-to-end reference the server can be asked about later
    reference: str | None = None
    #: callbacks for this call only, beside the client's
    hooks: Hooks | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a transport needs besides the inner transport; shared by its mounts."""

    store: OperationStore
    policy: RetryPolicy
    clock: Clock
    budget: RetryBudget
    hooks: Hooks
    max_request_body: int
    rng: random.Random
    #: the store was opened from a path or URL for these settings, so closing the
    #: transports closes it too; a `Store` object passed in stays the caller's
    owns_store: bool = False
    #: what the server means by its answers (see `idemclient.profiles`): the one the
    #: caller chose, or the default
    profile: Profile = DEFAULT_PROFILE
    #: the profile each request's host speaks (see `_hosts`); None: `profile` everywhere
    hosts: ByHost | None = None
    #: notices `clock` stepping back while the client runs (see `clock_went_back`)
    watch: StepWatch | None = None
    #: the servers' `Date` headers, a second clock for judging ages and holds (see
    #: `_server_time`); None: judged by `clock` alone (`server_clock=False`)
    server_times: ServerTimes | None = None
    #: ask an origin its time (one `HEAD /`) before this client's first operation
    #: there, unless an answer told it already (`time_probe=True`); off by default: the
    #: time is learnt from the `Date` of the answers the caller's own requests get
    time_probe: bool = False
    #: when (on `clock`) this client started watching its clock (`watch`): a stamp
    #: made since is judged by `clock` alone, as before; the servers' clocks are asked
    #: about stamps made before, while no client may have been running to see a step
    watched_since: float = float("inf")

    #: the facts `resolve_at` found, by profile, method and path: asked several times
    #: per request (the client, the exchange, the transport), the same each time
    _resolved: dict[tuple[int, str, str], Resolved] = dataclasses.field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def step_back(self) -> float:
        """Seconds `clock` has gone back since the watch last kept a step (0.0: none
        past the tolerance)."""
        return self.watch.step_back() if self.watch is not None else 0.0

    def heard(self, request: httpx.Request, response: httpx.Response) -> None:
        """Note the `Date` of `response` (to `request`), or that it had none: cheap,
        parsed only when a judgement needs the server's time."""
        times = self.server_times
        if times is not None:
            headers = response.headers
            times.heard(
                origin_of(request.url),
                headers.get("date"),
                self.clock.monotonic(),
                headers.get("age"),
            )

    def server_time(self, url: httpx.URL, *, stamped: float) -> ServerTime | None:
        """The server's time now, by the latest `Date` from `url`'s origin, to judge a
        stamp made at `stamped`; None if none came (or it was garbled, or
        `server_times` is off), or the stamp was made since this client started
        watching its clock (it would have seen a step back since; see `watched`)."""
        times = self.server_times
        if times is None or self.watched(stamped):
            return None
        return times.at(origin_of(url), self.clock.monotonic())

    def watched(self, stamped: float) -> bool:
        """A stamp made at `stamped` was made while this client watched its clock
        (a step back since would have been seen and kept: `clock_went_back`), so this
        clock alone judges it, as it always did. Before that, no client may have been
        running, and the servers' `Date` is asked too."""
        return stamped >= self.watched_since

    def profile_at(self, url: httpx.URL) -> Profile:
        """The profile a request to `url` speaks: the chosen one, else its host's
        provider's, else the default (see `_hosts`)."""
        return self.profile if self.hosts is None else self.hosts.at(url.host)[0]

    def resolve(self, request: httpx.Request) -> Resolved:
        """The profile's facts for `request` (its endpoint's, where they differ)."""
        return self.resolve_url(request.method, request.url)

    def resolve_url(self, method: str, url: httpx.URL) -> Resolved:
        """The facts of the profile a request with `method` to `url` speaks. Raises
        `ProfileMismatch` for one that the chosen profile or the host's provider's
        sends as an operation, where the two disagree (see `_hosts`)."""
        hosts = self.hosts
        if hosts is None:
            profile, known = self.profile, None
        else:
            profile, known = hosts.at(url.host)
        # Only a profile with facts per endpoint looks at the path (parsing it costs).
        resolved = self.resolve_at(method, url.path if profile.endpoints else "", profile)
        if known is not None:
            there = self.resolve_at(method, url.path if known.endpoints else "", known)
            if resolved.keyed or there.keyed:
                assert hosts is not None
                raise hosts.refusal(url.host, method, url.path, known)
        return resolved

    def resolve_at(self, method: str, path: str, profile: Profile | None = None) -> Resolved:
        """The facts of `profile` (the client's own by default) for `method` at `path`
        (see `Profile.resolve`)."""
        profile = profile or self.profile
        cache = self._resolved
        found = cache.get((id(profile), method, path))
        if found is None:
            found = profile.resolve(method, path, self.policy.methods)
            if len(cache) >= _RESOLVED_KEPT:  # paths with ids in them are endless
                cache.clear()
            cache[(id(profile), method, path)] = found
        return found

    @property
    def methods(self) -> frozenset[str]:
        """The methods that get a key under the client's own profile: the profile's,
        where it names them, else the policy's."""
        return self.methods_of(self.profile)

    def methods_of(self, profile: Profile) -> frozenset[str]:
        """The methods that get a key under `profile` (see `methods`)."""
        return profile.methods if profile.methods is not None else self.policy.methods

    def keyed(self, request: httpx.Request) -> bool:
        """`request` is an operation: it gets a key, a record and retries."""
        return self.resolve(request).keyed

    def retention(self, resolved: Resolved) -> float:
        """How long the server keeps this request's key: the policy's, if the caller
        set it (deprecated), else the profile's."""
        if retention_set(self.policy):
            return self.policy.key_retention
        return resolved.key_retention


#: How many (method, path) facts a `Settings` keeps at most.
_RESOLVED_KEPT = 256

#: What reading a caller's body can raise: a file opened write-only or in text mode, a
#: closed file, a generator httpx has already consumed.
_UNREADABLE = (OSError, ValueError, TypeError, httpx.StreamError)


class _BodyBuffer:
    """A request body being buffered so that every attempt can send it again.

    At most `limit` bytes are held: a longer body is refused as soon as it is seen to be
    too long, not after it has all been read into memory.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, chunk: object) -> None:
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise RequestNotReplayable(
                f"the request body yielded {type(chunk).__name__}, not bytes: send bytes,"
                " or open a file in binary mode"
            )
        self.size += len(chunk)
        if self.size > self.limit:
            raise RequestNotReplayable(
                f"request body is over max_request_body ({self.limit} bytes): it must be"
                " buffered to be sent again with the same key; raise the limit or send less"
            )
        self.parts.append(bytes(chunk))

    def body(self) -> bytes:
        return b"".join(self.parts)


def _unreadable(error: BaseException) -> RequestNotReplayable:
    """The error for a body whose reading failed (chained to the cause by the caller)."""
    return RequestNotReplayable(
        f"the request body could not be read ({type(error).__name__}: {error}), so it"
        " cannot be buffered and sent again with the same key; nothing was recorded or sent"
    )


def body_from_chunks(chunks: Iterable[bytes], limit: int) -> bytes:
    """Buffer a request body so that every attempt can send it again, up to `limit`."""
    buffer = _BodyBuffer(limit)
    iterator = iter(chunks)
    while True:
        try:
            chunk = next(iterator)
        except StopIteration:
            return buffer.body()
        except _UNREADABLE as exc:
            raise _unreadable(exc) from exc
        buffer.add(chunk)


async def abody_from_chunks(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """`body_from_chunks` for an async body."""
    buffer = _BodyBuffer(limit)
    iterator = aiter(chunks)
    while True:
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            return buffer.body()
        except _UNREADABLE as exc:
            raise _unreadable(exc) from exc
        buffer.add(chunk)


def buffered_body(request: httpx.Request, limit: int) -> bytes | None:
    """The body if httpx already holds it in memory, else None (stream it in)."""
    try:
        content = request.content
    except httpx.RequestNotRead:
        return None
    if type(content) is bytes and len(content) <= limit:
        return content  # already whole and immutable: nothing to copy
    return body_from_chunks((content,), limit)


def intent_for(request: httpx.Request, body: bytes, resolved: Resolved | None = None) -> Intent:
    """The intent a request stands for. A caller that registers operations ahead of
    sending them (a batch) builds them here too, so the fingerprints agree. `resolved`:
    the profile's facts for it (where its key is, what a key may be); the generic
    profile's when not given."""
    options = request.extensions.get(CALL_OPTIONS)
    if options is not None and not isinstance(options, CallOptions):
        raise TypeError(f"request extension {CALL_OPTIONS!r} must be CallOptions")
    if resolved is None:
        resolved = DEFAULT_PROFILE.resolve(request.method, request.url.path, frozenset())
    given = key_in(request, body, resolved)
    key = resolved.check_key(given) if given is not None else resolved.check_key(new_key())
    if given is None and resolved.key.header is None:
        raise MissingKey(
            None,
            f"the {resolved.profile.name} profile's server reads the key from the"
            f" {resolved.key.where}, and this request's body has none: put it there"
            " (idemclient's Client does, from key= or a new one)",
        )
    operation_id = (options.operation_id if options else None) or key
    if not operation_id or len(operation_id) > 1024:
        raise InvalidKey(operation_id, "an operation id must be 1..1024 characters")
    # Stored and fingerprinted without credentials: no user or password, no value of a
    # secret-looking query parameter (see `_redaction`).
    url = redact_url(request.url)
    return Intent(
        operation_id=operation_id,
        key=key,
        key_given=given is not None,
        method=request.method,
        url=str(url),
        headers=tuple(request.headers.multi_items()),
        body=body,
        fingerprint=fingerprint(
            request.method, url, body, **body_type(request.headers.multi_items())
        ),
        reference=options.reference if options else None,
        profile=resolved.profile.name,
    )


def key_in(request: httpx.Request, body: bytes, resolved: Resolved) -> str | None:
    """The key `request` carries where its profile's server reads it, or None. A key in
    the `Idempotency-Key` header where the server reads it elsewhere is refused (see
    `check_unread_key_header`)."""
    given = _key_in_slot(request, body, resolved)
    where = resolved.key.where
    check_unread_key_header(
        resolved, request.headers, [] if given is None else [(f"the {where}", given)]
    )
    return given


def check_unread_key_header(
    resolved: Resolved, headers: httpx.Headers, given: list[tuple[str, str]]
) -> None:
    """Refuse a key in the `Idempotency-Key` header where the profile's server reads its
    key elsewhere (PayPal's `PayPal-Request-Id`, Square's body field...), before anything
    is recorded. `given`: the keys given where that server reads one (where, key).

    The caller who wrote that header meant it as the payment's key, but that server never
    sees it: with none where it looks, the request would go with a key of the client's
    making, another in every store (the same payment asked again from another machine is
    a second payment there); with another one there, two keys for one request. The same
    key in both places is one key."""
    slot = resolved.key
    if slot.header is not None and slot.header.lower() == KEY_HEADER.lower():
        return
    unread = headers.get_list(KEY_HEADER)
    if not unread:
        return
    if not given:
        raise MissingKey(
            unread[0],
            f"it is in the {KEY_HEADER} header, which the {resolved.profile.name} profile's"
            f" server does not read (it reads the {slot.where}): sent so, the payment would"
            " go under a key of the client's making, another one from every store. Put"
            f" your key in the {slot.where} (a Client also takes it as key=); nothing was"
            " recorded or sent",
        )
    one_key([*given, *((f"the {KEY_HEADER} header", value) for value in unread)])


def _key_in_slot(request: httpx.Request, body: bytes, resolved: Resolved) -> str | None:
    slot = resolved.key
    if slot.header is not None:
        given = request.headers.get_list(slot.header)
        if len(given) == 1:
            return slot.key_from_header(given[0])
        # The header given more than once: one key, or two for one request (refused).
        return one_key((f"the {slot.header} header", slot.key_from_header(v)) for v in given)
    assert slot.field is not None
    try:
        document = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if not isinstance(document, dict):
        raise MissingKey(
            None,
            f"the {resolved.profile.name} profile's server reads the key from the"
            f" {slot.where}, and this request's body is not a JSON object: nothing was"
            " recorded or sent",
        )
    value = document.get(slot.field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidKey(value, f"the body's {slot.field!r} must be a string")
    return value


def interrupted_before_sending(error: BaseException, before: str) -> str:
    """The evidence of an operation whose call was cut short before it handed anything
    to the transport: that, and what was last seen before it, if anything was (never
    an earlier interruption's words, so repeated ones do not pile up; but what an
    earlier one kept as last seen stays: it may be an answer that decides whether the
    operation may be sent again, see `_status_in`)."""
    text = f"interrupted by {type(error).__name__} before this call sent anything"
    seen = _seen_before(before)
    if seen:
        text += f"{_SEEN_BEFORE}{seen})"
    return text


#: How `interrupted_before_sending` keeps what was last seen before an interruption.
_SEEN_BEFORE = " (last seen before: "


def _seen_before(evidence: str) -> str:
    """What `evidence` says was last seen of the operation, past the interruptions
    that sent nothing (`interrupted_before_sending`): "" if nothing was."""
    if not evidence.startswith("interrupted by"):
        return evidence
    _, found, seen = evidence.partition(_SEEN_BEFORE)
    return seen[:-1] if found and seen.endswith(")") else ""


def unsettled_error(
    outcome: Outcome,
    reason: str,
    *,
    reconcile: bool = False,
    lost_to: str | None = None,
    lost_held: bool = True,
) -> OutcomeError:
    """The exception for an operation that has no final answer (`outcome` says where it
    stands): `NotSent` only when nothing of it can have reached the server. `lost_to`:
    the caller that took this call's lapsed lease over, which holds it still
    (`lost_held`) or has let it go since."""
    text = (
        f"operation {outcome.operation_id!r} (key {outcome.key}) is {outcome.state.words}"
        f" after {outcome.attempts} attempt(s): {reason}; last seen: {outcome.evidence}"
    )
    if lost_to is not None:
        now = (
            "it holds it now, and sends it with the same key"
            if lost_held
            else "it has let it go since, unfinished"
        )
        return Indeterminate(
            text + f". This call's lease lapsed and {lost_to} took the operation over: {now}."
            " It may have been applied: look at it again later (re-issue it, or resume),"
            " never under a new key.",
            outcome,
        )
    if outcome.state is State.CHALLENGED:
        return ChallengeRequired(
            text + ". Nothing was applied. The server asks for the request to be signed"
            " (strong customer authentication): clear the challenge of the one-time token"
            " in the answer's x-2fa-approval header (outcome.response), then issue the"
            " same operation again with that header; the key stays the same.",
            outcome,
        )
    if outcome.state is State.NOT_SENT and not outcome.maybe_applied:
        if outcome.last_status is None:
            told = "Nothing reached the server"
        else:
            # A 429 or 503 reached the server, which said it did nothing with it.
            told = f"The server answered (HTTP {outcome.last_status}) and applied nothing"
        return NotSent(f"{text}. {told}; safe to send again with the same key.", outcome)
    if reconcile:
        error = ReconcileRequired(
            text + ". Settle it with Client.reconcile(operation_id, lookup=...): a"
            " look-up on the server, never a second send.",
            outcome,
        )
        error.reason = reason
        return error
    return Indeterminate(
        text + ". It may have been applied: resume it with the same key, or look it up.",
        outcome,
    )


@dataclass(slots=True)
class Continuation:
    """An operation handed back to httpx unfinished (a 401 or 407 for its auth flow, a
    3xx for its redirect handling), which httpx may send on.

    It travels in the request's extensions (httpx copies them into the request that
    follows a redirect, and an auth flow re-sends the same request), so the transport
    recognises the next request as the same operation: same key, same deadline.
    """

    operation_id: str
    key: str
    method: str
    #: scheme, host and port the operation was sent to: a redirect never leaves it
    origin: tuple[bytes, bytes, int | None]
    #: the call's deadline (monotonic), which every continuation shares
    deadline: float
    #: attempts made so far by this exchange (counted against `max_attempts`)
    attempts: int
    #: the status that handed it back
    status: int
    #: where the operation stands: the outcome of whatever ends the exchange here
    outcome: Outcome
    #: the outcome hooks have been told about `outcome`
    told: bool = False
    #: httpx has followed it with a GET (after a 301, 302 or 303)
    followed: bool = False
    #: others may know its key (the caller's, an identity's, a continued operation's):
    #: not one made for this exchange
    key_shared: bool = True

    @property
    def redirected(self) -> bool:
        return 300 <= self.status < 400


def origin_of(url: httpx.URL) -> tuple[bytes, bytes, int | None]:
    return (url.raw_scheme, url.raw_host, url.port)


class Call:
    """The decisions of one call. Not thread-safe: one call, one thread or task.

    A call starts a new operation (or finds it again) from its request, or continues
    one that httpx sends on after a `Continuation` (a redirect, an auth flow).
    """

    def __init__(
        self,
        settings: Settings,
        request: httpx.Request,
        body: bytes,
        *,
        continuation: Continuation | None = None,
    ) -> None:
        self.settings = settings
        self.request = request
        self.policy = settings.policy
        self.clock = settings.clock
        self.started = self.clock.monotonic()
        options = request.extensions.get(CALL_OPTIONS)
        self.call_hooks = options.hooks if isinstance(options, CallOptions) else None
        self.continuation = continuation
        self.resolved = settings.resolve(request)
        self.profile = self.resolved.profile
        self.intent: Intent | None
        if continuation is None:
            self.intent = intent_for(request, body, self.resolved)
            self.operation_id = self.intent.operation_id
            self.key = self.intent.key
            self.deadline = self.started + self.policy.deadline
            self.attempts_here = 0
        else:
            self.intent = None
            self.operation_id = continuation.operation_id
            self.key = continuation.key
            self.deadline = continuation.deadline
            self.attempts_here = continuation.attempts
        self.last_status: int | None = None
        self.last_kind: AttemptKind | None = None
        self.total_attempts = 0
        self.maybe_applied = False
        #: when this call last sent an attempt that may have been applied
        self.sent_at: float | None = None
        #: the server's time then, by its `Date` (an upper bound), if this client knew it
        self.server_sent_at: float | None = None
        #: an answer read as a replay came that no attempt of ours explains (kept by
        #: the store for good: `OperationRecord.replay_unexplained`)
        self.replay_unexplained = False
        self.evidence = ""
        self.not_before: float | None = None
        self.created_at = 0.0
        #: the server's time when the operation was recorded (a lower bound), if known
        self.server_created_at: float | None = None
        self.record: OperationRecord | None = None
        self.settled = False
        self._sending = False
        self._reconcile = False
        #: the last answer was read as a replay that nothing of ours explains
        self._doubted = False
        self._error: BaseException | None = None
        self._busy_poll = _BUSY_POLL_FIRST
        self.challenge: httpx.Response | None = None
        #: the resource the last answer names as made under this key (GoCardless)
        self.existing: str | None = None
        #: the client's retry budget refused a retry of this call
        self.budget_spent = False
        #: the key of the outcome told (a re-issued operation's, from the store)
        self.key_told: str | None = None
        request.stream = httpx.ByteStream(body)
        if continuation is None and (
            settings.hooks.on_start is not None
            or (self.call_hooks is not None and self.call_hooks.on_start is not None)
        ):
            start = StartEvent(self.operation_id, self.key, request.method, str(request.url))
            settings.hooks.start(start)
            if self.call_hooks is not None:
                self.call_hooks.start(start)

    # -- before sending ----------------------------------------------------------------

    def lease_until(self) -> float:
        # The last attempt may still be reading its answer one read timeout after the
        # deadline (a timeout is per read): the lease covers that too.
        grace = min(self.policy.attempt_timeout, self.policy.deadline)
        return lease_until(self.clock.time(), remaining=self.remaining(), grace=grace)

    def remaining(self) -> float:
        return self.deadline - self.clock.monotonic()

    def adopt(self, record: OperationRecord) -> None:
        """Continue from what the store knows (earlier calls, earlier processes)."""
        self.key = record.key
        slot = self.resolved.key
        if slot.header is not None:
            self.request.headers[slot.header] = slot.header_value(record.key)
        self.total_attempts = record.attempts
        self.maybe_applied = record.maybe_applied
        self.replay_unexplained = record.replay_unexplained
        self.evidence = record.evidence
        self.not_before = record.not_before
        self.created_at = record.created_at
        self.server_created_at = record.server_created_at
        # Held from the last send that may have been applied, whoever kept it: a look-up
        # that took the row from an owner dead in flight gives it back with no owner (no
        # takeover to see) and with that owner's send time, which no call had held from.
        if record.maybe_applied and record.sent_at is not None:
            self.hold_in_flight(since=record.sent_at, server_since=record.server_sent_at)
        # Last: a call with a record has adopted all of it (a call cut short before
        # this gives its lease back as the store has it, see `_flow.operation`).
        self.record = record

    def past_retention(self, *, now: float, at: float) -> Decision | None:
        """A stop for a look-up if an operation that may have been applied, sent at `at`
        (now, or after a wait this call would sleep), may reach a server that has
        forgotten its key by then; None if not."""
        retention = self.settings.retention(self.resolved)
        # The older of its ages by this clock and by the server's: this clock may have
        # been set back since it was recorded, which no record shows.
        age = self.age(now)
        age_sent = age + max(0.0, at - now)
        # The host that recorded it may have been up to CLOCK_SKEW fast: its age may
        # be that much more than it looks.
        if within_retention(age_sent, retention):
            return None
        self._reconcile = True
        when = "" if at <= now else f", {max(0.0, age_sent):.0f}s once its wait ends"
        local = now - self.created_at
        by = (
            ""
            if age <= local
            else f" by the server's clock ({max(0.0, local):.0f}s by this host's)"
        )
        return Decision(
            "stop",
            reason=(
                f"maybe applied and {max(0.0, age):.0f}s old{by}{when}, past the server's key"
                f" retention ({retention:.0f}s, {self.profile.name} profile): look"
                " it up instead"
            ),
        )

    def server_time(self, stamped: float) -> ServerTime | None:
        """The server's time now, by the latest `Date` its origin sent this client, to
        judge a stamp made at `stamped` (see `Settings.server_time`)."""
        return self.settings.server_time(self.request.url, stamped=stamped)

    def age(self, now: float) -> float:
        """The operation's age at `now`: by this clock, or by the server's if more (from
        the server's time when it was recorded, where the record keeps it)."""
        server = self.server_time(self.created_at)
        return _time.age(
            self.created_at, now=now, server=server, server_stamped=self.server_created_at
        )

    def server_now(self) -> ServerTime | None:
        """The server's time now, by the latest `Date` its origin sent this client,
        whatever it is to judge: what a record keeps beside its own stamps (None if none
        came, or `server_times` is off)."""
        times = self.settings.server_times
        if times is None:
            return None
        return times.at(origin_of(self.request.url), self.clock.monotonic())

    def stamped_intent(self) -> Intent:
        """The intent, with the server's time as it is recorded (a lower bound: the
        server first sees its key later), so that its age can be judged on the server's
        clock alone, whatever this host's clock said then."""
        assert self.intent is not None
        server = self.server_now()
        if server is None:
            return self.intent
        return dataclasses.replace(self.intent, server_created_at=server.low)

    def _sent_now(self) -> None:
        """An attempt that may have been applied was sent (or learnt to be) now."""
        self.sent_at = self.clock.time()
        server = self.server_now()
        self.server_sent_at = None if server is None else server.high

    def probe_timeout(self) -> float:
        """How long a time probe (see `probe`) may take: `PROBE_TIMEOUT`, and a quarter
        of the call's time left (a HEAD that hangs leaves the operation the rest); 0.0
        or less: no time for one."""
        remaining = self.remaining()
        if remaining <= 0:
            return 0.0
        return min(PROBE_TIMEOUT, self.policy.attempt_timeout, remaining * _PROBE_SHARE)

    def probe(self, timeout: float) -> httpx.Request:
        """A request that asks the operation's server its time (its `Date`) and does
        nothing else: HEAD on the root of the operation's origin (never its own URL: a
        server whose payment view does not check the method would run it, keyless) with
        the call's headers, without its key, body or body headers, within `timeout`
        (`probe_timeout`)."""
        headers = httpx.Headers(self.request.headers)
        for name in ("content-length", "content-type", "transfer-encoding"):
            headers.pop(name, None)
        slot = self.resolved.key
        if slot.header is not None:
            headers.pop(slot.header, None)
        # The origin's time, not a cache's copy of an old answer (whose Date is old).
        headers["cache-control"] = "no-cache"
        return httpx.Request(
            "HEAD",
            self.request.url.copy_with(raw_path=b"/"),
            headers=headers,
            extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)},
        )

    def busy_wait(self) -> float | None:
        """Seconds to wait for another owner's lease, or None to give up now."""
        wait = self._busy_poll
        if wait >= self.remaining():
            return None
        self._busy_poll = min(_BUSY_POLL_MAX, self._busy_poll * 2)
        return wait

    def gate(self) -> float | Decision:
        """Before the first attempt: seconds to wait first (0.0 for none), or a stop."""
        now = self.clock.time()
        if self.maybe_applied:
            # By this clock: a stamp ahead of it is a step back.
            recorded_ahead = ahead(self.created_at, now)
            # Judged at the time it would be sent: after a wait it must keep first (the
            # in-flight hold, a server's not-before), which this call may sleep out.
            late = self.past_retention(
                now=now, at=now if self.not_before is None else max(now, self.not_before)
            )
            if late is not None:
                return late
            unstored = _status_in(self.evidence)
            if unstored is not None and unstored in self.profile.unstored:
                # Its server kept no answer under the key for that: the same key sent
                # again runs the request again, which may have been applied.
                self._reconcile = True
                return Decision(
                    "stop",
                    reason=(
                        f"maybe applied, and its last answer (HTTP {unstored}) is one the"
                        f" {self.profile.name} profile's server does not keep under its key:"
                        " sent again it would run again; look it up instead"
                    ),
                )
            stepped = self.record.clock_stepped if self.record is not None else None
            if stepped is not None:
                # A clock went back while it was unfinished: it may have been recorded
                # by a clock running fast, so its age may be more than it looks, by any
                # amount, and it looks young long after the server forgot its key.
                self._reconcile = True
                return Decision(
                    "stop",
                    reason=(
                        f"maybe applied, and a clock of this store was seen to go back"
                        f" {stepped:.0f}s while it was unfinished: its age, and so whether"
                        " the server still holds its key, is unknown; look it up instead"
                    ),
                )
            if recorded_ahead:
                # Recorded at a time this clock has not reached: the clock went back, or
                # was fast then. Its real age is unknown, so it may be past retention.
                self._reconcile = True
                return Decision(
                    "stop",
                    reason=(
                        f"maybe applied, and recorded {recorded_ahead:.0f}s ahead of this"
                        " clock: its age, and so whether the server still holds its key, is"
                        " unknown; look it up instead"
                    ),
                )
        if self.not_before is not None and self.not_before > now:
            wait = self.not_before - now
            if wait > self.policy.max_retry_after or wait >= self.remaining():
                reason = f"the server asked for no retry before {self.not_before:.3f}"
                if self.maybe_applied and not self.profile.guards_in_flight:
                    reason = (
                        f"maybe applied, and its attempt may still be running at the server,"
                        f" which does not refuse a second request while the first runs"
                        f" ({self.profile.name} profile): not sent again for {wait:.0f}s"
                        " more (the profile's in_flight_for, and the clock skew allowed"
                        " between the store's hosts); look it up, or resume it after that"
                    )
                return Decision("stop", not_before=self.not_before, reason=reason)
            return wait
        return 0.0

    # -- each attempt ------------------------------------------------------------------

    def prepare(self) -> float | None:
        """Set up the next attempt; its timeout in seconds, or None if time is up."""
        remaining = self.remaining()
        if remaining <= 0:
            return None
        timeout = min(self.policy.attempt_timeout, remaining)
        current = self.request.extensions.get("timeout") or {}
        self.request.extensions["timeout"] = {
            name: timeout if current.get(name) is None else min(current[name], timeout)
            for name in ("connect", "read", "write", "pool")
        }
        hooks, call_hooks = self.settings.hooks, self.call_hooks
        if hooks.takes_attempt() or (
            call_hooks is not None and call_hooks.takes_attempt(log=False)
        ):
            event = AttemptEvent(
                operation_id=self.operation_id,
                key=self.key,
                method=self.request.method,
                url=str(self.request.url),
                attempt=self.total_attempts + 1,
                timeout=timeout,
            )
            hooks.attempt(event)
            if call_hooks is not None:
                call_hooks.attempt(event, log=False)
        return timeout

    def sending(self) -> httpx.Request:
        """The request, as it is handed to the transport: from here on the attempt
        counts, and may have been applied if the call is cut short before its answer
        is seen. Nothing before this (a hook that raised, a Ctrl-C, a cancellation)
        counts as sent; from its first line on, everything does (the safe side)."""
        self._sending = True
        self.attempts_here += 1
        self.total_attempts += 1
        return self.request

    def reads_first(self, response: httpx.Response) -> bool:
        """The answer's body must be read before it can be classified: its status
        alone does not say what it means under this profile (an error code)."""
        return response.status_code in self.profile.needs_codes

    def observe(self, result: httpx.Response | Exception) -> Classification:
        self._sending = False
        unexplained = False
        if isinstance(result, httpx.Response):
            codes = (
                codes_in(result.content, self.profile.code_paths)
                if self.reads_first(result)
                else frozenset()
            )
            found = classify_response(
                result,
                retry_statuses=self.policy.retry_statuses,
                follow_server_hints=self.policy.follow_server_hints,
                profile=self.profile,
                codes=codes,
            )
            if found.kind is AttemptKind.REPLAYED and not self._may_be_known():
                # A replay of what? No attempt under this key may have reached the
                # server, and no one else knows the key: the status is the server's own
                # answer (a 409 of the application's), a refusal, not a stored success.
                found = Classification(
                    AttemptKind.REJECTED, retry=False, maybe_applied=False, final=True
                )
            elif found.kind is AttemptKind.REPLAYED and not self._replay_explained(result):
                # Others may know the key (the caller's), but no attempt of ours may have
                # been applied (or one such answer already came unexplained): the replay
                # of another sender's payment under it, or the application's own refusal
                # (a 409 of its own). Maybe applied, with no answer; a look-up settles it.
                unexplained = self.replay_unexplained = True
                self._reconcile = True
                found = Classification(
                    AttemptKind.UNKNOWN, retry=False, maybe_applied=True, final=False
                )
            if self.maybe_applied:
                found = after_maybe_applied(
                    found,
                    status=result.status_code,
                    replayed=self.profile.replayed(result.headers),
                    server_replays=self.policy.server_replays or self.profile.replays_errors,
                )
            self.evidence = f"HTTP {result.status_code} {result.reason_phrase}".rstrip()
            if found.kind is AttemptKind.REDIRECT and "location" in result.headers:
                self.evidence += f" to {redact_location(result.headers['location'])}"
            elif self.maybe_applied and not found.final and found.kind in _REFUSALS:
                self.evidence += (
                    " after an attempt that may have been applied (the server may be"
                    " refusing a duplicate)"
                )
            if unexplained:
                self.evidence += (
                    " (a stored success's replay under this profile) to a key others may"
                    " know, with no attempt of ours that may have been applied before it"
                )
            self.last_status = result.status_code
            self.existing = None
            if found.kind is AttemptKind.EXISTING:
                self.existing = self.profile.existing_id(
                    result.status_code, result.headers, result.content
                )
                self.evidence += (
                    f" naming {self.existing or 'a resource'} as made under this key"
                    " already: what it came to is read from the resource"
                )
            if found.kind is AttemptKind.CHALLENGED:
                self.evidence += (
                    " (the server asks for the request to be signed first: x-2fa-approval)"
                )
                self.challenge = result
        else:
            found = classify_error(result)
            self.evidence = f"{type(result).__name__}: {result}".rstrip(": ")
            self._error = result
        self._doubted = unexplained
        # An unexplained replay counts as a send too, the time it was learnt: a look-up's
        # "none" waits from there (the row's last write, which stands in otherwise, may
        # be ahead of the clock by a step it went back). Not an answer naming the
        # resource made under the key: that request ran nothing (the one that made it
        # was sent before, and its send is kept already).
        if found.maybe_applied and found.kind is not AttemptKind.EXISTING:
            self._sent_now()
        self.maybe_applied = self.maybe_applied or found.maybe_applied
        self.last_kind = found.kind
        hooks, call_hooks = self.settings.hooks, self.call_hooks
        if hooks.on_attempt_end is None and (
            call_hooks is None or call_hooks.on_attempt_end is None
        ):
            return found
        event = AttemptEndEvent(
            operation_id=self.operation_id,
            key=self.key,
            attempt=self.total_attempts,
            status=result.status_code if isinstance(result, httpx.Response) else None,
            classification=found.kind.value,
            evidence=self.evidence,
            maybe_applied=self.maybe_applied,
            error=None if isinstance(result, httpx.Response) else _error_name(result),
        )
        hooks.attempt_end(event)
        if call_hooks is not None:
            call_hooks.attempt_end(event)
        return found

    @property
    def keeps_answer(self) -> bool:
        """The last answer is kept with the unsettled operation: read as a replay that
        nothing of ours explains, it is the application's refusal if a look-up finds
        no payment, and then the operation's final answer (`_reconcile.apply`)."""
        return self._doubted

    def _may_be_known(self) -> bool:
        """The server may hold an answer under this key: an attempt of the operation
        may have reached it, or the key is not one this client made for this call (the
        caller's, an identity's, or a continued operation's), so others may have sent it.
        An operation issued again by its id alone is sent under its recorded key, which
        may have been the caller's: not the one made for this call."""
        return self.maybe_applied or self._key_shared()

    def _key_shared(self) -> bool:
        """Others may know the key: it is not one this client made for this exchange (a
        continuation after an auth flow's 401 or a redirect keeps the first call's)."""
        if self.continuation is not None:
            return self.continuation.key_shared
        intent = self.intent
        return intent is None or intent.key_given or self.key != intent.key

    def _replay_explained(self, response: httpx.Response) -> bool:
        """An answer read as a replay is this operation's stored success: it says so
        (its profile's replay asks for a header or an error code that the application's
        own answer never has, or it carries the profile's replay marker), or an attempt
        of ours may have been applied and no such answer has come unexplained before
        (after one, the application's own refusal would read the same)."""
        replay = self.profile.replay
        if replay is not None and (replay.header is not None or replay.codes):
            return True
        if self.profile.replayed(response.headers):
            return True
        return self.maybe_applied and not self.replay_unexplained

    def bound_body(self, response: httpx.Response) -> None:
        """Make reading `response`'s body give up at the deadline (see `_DeadlineStream`)."""
        bound_body(response, self.remaining)

    def decide(self, found: Classification, response: httpx.Response | None) -> Decision:
        if self._doubted:
            return Decision(
                "stop",
                reason=(
                    "it may be the replay of a payment another process made under this key,"
                    " or the application's own refusal, and sending again cannot tell"
                ),
            )
        if found.kind is AttemptKind.EXISTING:
            return Decision(
                "stop",
                reason=(
                    f"the server says it made {self.existing or 'a resource'} under this"
                    " key already; whether that payment was applied, declined or is still"
                    " running is read from the resource (Client fetches it; or"
                    " Client.reconcile, or resume)"
                ),
            )
        if found.retry and self.maybe_applied and not self.profile.guards_in_flight:
            return Decision(
                "stop",
                reason=(
                    f"the {self.profile.name} profile's server is not known to refuse a"
                    " second request while the first runs, so an attempt that may have"
                    " been applied is not followed by another; look it up"
                    " (Client.reconcile), or resume it once the first has surely ended"
                ),
            )
        if found.retry and response is not None and response.status_code in self.profile.unstored:
            return Decision(
                "stop",
                reason=(
                    f"the {self.profile.name} profile's server does not keep an HTTP"
                    f" {response.status_code} answer under its key, so the same key sent"
                    " again would run the request again; look it up (Client.reconcile)"
                ),
            )
        now = self.clock.time()
        server_wait = None if response is None else parse_retry_after(response.headers, now)
        decision = decide(
            self.policy,
            found,
            attempts=self.attempts_here,
            remaining=self.remaining(),
            server_wait=server_wait,
            now=now,
            rng=self.settings.rng,
        )
        if decision.not_before is not None:
            self.not_before = decision.not_before
        if decision.action == "retry" and self.maybe_applied:
            # The retry is sent after its wait: not once the server may have forgotten
            # the key of an attempt that may have been applied.
            late = self.past_retention(now=now, at=now + decision.wait)
            if late is not None:
                return late
        if decision.action == "retry":
            if not self.settings.budget.withdraw(decision.cost):
                self.evidence += BUDGET_STOP
                self.budget_spent = True
                return Decision("stop", reason="the client's retry budget is spent")
            event = RetryEvent(
                operation_id=self.operation_id,
                key=self.key,
                attempt=self.total_attempts,
                evidence=self.evidence,
                wait=decision.wait,
                maybe_applied=self.maybe_applied,
            )
            self.settings.hooks.retry(event)
            if self.call_hooks is not None:
                self.call_hooks.retry(event, log=False)
        return decision

    # -- the end -------------------------------------------------------------------------

    def move(self, event: Event) -> State:
        """The state `event` leads to from the state this call holds the operation in
        (the state table, `_states`): a bug raised at once, before anything is written,
        if the table does not allow it."""
        return after(self.record.state if self.record is not None else NEW, event)

    def unsettled_state(self) -> State:
        """As the store records it (a challenge is `not_sent`: nothing was applied)."""
        return self.move(stop(self.maybe_applied))

    def interrupted(self, error: BaseException) -> None:
        """The call was cut short from outside (cancelled, interrupted, a hook raised)."""
        # Cut short while an attempt was on the wire: the request may have arrived.
        if self._sending:
            self._sent_now()
            self.maybe_applied = True
        elif not self.attempts_here:
            # Nothing of this call reached the transport: what the operation was before
            # it stays what it is (its evidence too), and no hold starts from here.
            self.evidence = interrupted_before_sending(error, self.evidence)
            return
        self.evidence = f"interrupted by {type(error).__name__}"

    def hold_in_flight(
        self, *, since: float | None = None, server_since: float | None = None
    ) -> float | None:
        """An attempt that may have been applied (sent now, or at `since`) may still be
        running at a server that does not guard a key in flight: not sent again before
        the profile's `in_flight_for` (and the hosts' clock skew: `in_flight_until`) has
        passed (kept in `not_before`, for every later call). A hold from `since` that
        has already passed holds nothing. `server_since`: the server's time at `since`
        (kept with the record), from which its clock measures the hold. Returns when
        this hold ends (`not_before` may end later, for another reason), or None if it
        holds nothing."""
        if self.profile.guards_in_flight:
            return None
        now = self.clock.time()
        sent = now if since is None else since
        if since is None:
            known = self.server_now()
            server_since = None if known is None else known.high
        until = in_flight_until(sent, self.profile.in_flight_for)
        # Over only once over by the server's clock too: this clock may have been
        # stepped forward since `since` was stamped, which no record shows.
        server = self.server_time(sent)
        until = _time.held_until(
            until, since=sent, now=now, server=server, server_since=server_since
        )
        if since is not None and until <= now:
            return None
        self.not_before = until if self.not_before is None else max(self.not_before, until)
        return until

    def progress(self, *, settling: bool = False) -> Progress:
        """Where this call has got to, for the store. `settling`: the last write."""
        if settling:
            self.settled = True
            # No hold after the server named the resource it made under this key: it
            # answers that key with it from then on, never runs a request under it again.
            if (
                self.attempts_here
                and self.maybe_applied
                and self.last_kind is not AttemptKind.EXISTING
            ):
                self.hold_in_flight()
        return Progress(
            attempts=self.total_attempts,
            maybe_applied=self.maybe_applied,
            evidence=self.evidence,
            not_before=self.not_before,
            now=self.clock.time(),
            sent_at=self.sent_at,
            server_sent_at=self.server_sent_at,
            replay_unexplained=self.replay_unexplained,
        )

    def final_state(self, found: Classification) -> State:
        return State.SUCCEEDED if found.kind in SUCCESSES else State.FAILED

    def outcome(
        self,
        record: OperationRecord,
        response: httpx.Response | None,
        *,
        from_store: bool = False,
        tell: bool = True,
    ) -> Outcome:
        replayed = response is not None and (
            self.profile.replayed(response.headers)
            or (not from_store and self.last_kind is AttemptKind.REPLAYED)
        )
        outcome = from_record(
            record,
            response=response,
            replayed=replayed,
            from_store=from_store,
            last_status=response.status_code if response is not None else self.last_status,
            body_omitted=isinstance(response, AnswerWithoutBody),
            existing=self.existing or self._existing(record, response),
            key_conflict=self._conflict(record, response),
        )
        if (
            self.challenge is not None
            and record.state is State.NOT_SENT
            and not record.maybe_applied
        ):
            outcome = dataclasses.replace(outcome, state=State.CHALLENGED, response=self.challenge)
        if response is not None:
            response.extensions[OUTCOME] = outcome
        if outcome.state is State.SUCCEEDED and not from_store:
            self.settings.budget.deposit()
        if tell:
            self.tell(outcome)
        return outcome

    def tell(self, outcome: Outcome) -> None:
        self.key_told = outcome.key
        self.settings.hooks.outcome(outcome)
        if self.call_hooks is not None:
            self.call_hooks.outcome(outcome, log=False)

    def ended(self, error: BaseException | None) -> None:
        """Tell the hooks that this call ended, however it ended (see `EndEvent`). A
        hook that raises while something else is ending the call is logged, never put
        in the place of what ended it (a cancellation must stay a cancellation)."""
        hooks, call_hooks = self.settings.hooks, self.call_hooks
        if hooks.on_end is None and (call_hooks is None or call_hooks.on_end is None):
            return
        event = EndEvent(
            operation_id=self.operation_id,
            key=self.key_told or self.key,
            error=error,
            budget_spent=self.budget_spent,
        )
        for told in (hooks, call_hooks):
            if told is None:
                continue
            if error is None:
                told.end(event)
                continue
            try:
                told.end(event)
            except Exception:
                logger.warning(
                    "a hook raised as a call of operation %r ended by %s",
                    self.operation_id,
                    type(error).__name__,
                    exc_info=True,
                )

    def stored_answer(self, record: OperationRecord) -> httpx.Response:
        """The final answer of a finished operation, rebuilt from the store."""
        assert record.response is not None, "a finished operation has a stored response"
        # Its body, or, if the store did not keep it, a response that says so when read.
        response = stored_response(record.response, self.request)
        self.outcome(record, response, from_store=True)
        return response

    def handed_back(self, record: OperationRecord, response: httpx.Response) -> Continuation:
        """The continuation of an operation whose answer goes back to httpx unfinished."""
        outcome = self.outcome(record, response, tell=False)
        continuation = Continuation(
            operation_id=self.operation_id,
            key=record.key,
            method=self.request.method,
            origin=(
                self.continuation.origin
                if self.continuation is not None
                else origin_of(self.request.url)
            ),
            deadline=self.deadline,
            attempts=self.attempts_here,
            status=response.status_code,
            outcome=outcome,
            key_shared=self._key_shared(),
        )
        self.request.extensions[CONTINUATION] = continuation
        return continuation

    def _existing(self, record: OperationRecord, response: httpx.Response | None) -> str | None:
        """The resource an "already done, here it is" answer names, if this is one."""
        if response is None or record.state is not State.SUCCEEDED or self.profile.existing is None:
            return None
        if isinstance(response, AnswerWithoutBody):
            return None
        return self.profile.existing_id(response.status_code, response.headers, response.content)

    def _conflict(self, record: OperationRecord, response: httpx.Response | None) -> bool:
        """The final answer says the key was used for another request."""
        if response is None or record.state is not State.FAILED:
            return False
        codes: frozenset[str] = frozenset()
        if response.status_code in self.profile.needs_codes and not isinstance(
            response, AnswerWithoutBody
        ):
            codes = codes_in(response.content, self.profile.code_paths)
        found = classify_response(response, retry_statuses=(), profile=self.profile, codes=codes)
        return found.kind is AttemptKind.KEY_CONFLICT

    def error(self, outcome: Outcome, reason: str) -> OutcomeError:
        """The exception for an operation that ended without a final answer."""
        error = unsettled_error(outcome, reason, reconcile=self._reconcile)
        if self._error is not None:
            error.__cause__ = self._error
        return error

    def lost(self, record: OperationRecord) -> OutcomeError:
        """The exception for a call whose lease another caller took over: what this call
        did and saw (its attempts, not the other caller's; its last evidence), and that
        it lost the lease, to a caller that holds it now or has let it go since."""
        outcome = from_record(
            record,
            attempts=self.total_attempts,
            evidence=self.evidence or record.evidence,
            maybe_applied=True,
            from_store=False,
            body_omitted=False,
            last_status=self.last_status,
        )
        self.tell(outcome)
        holder = record.lease_owner
        return unsettled_error(
            outcome,
            "this call lost its lease to another caller",
            lost_to=holder or "another caller",
            lost_held=holder is not None,
        )

    def store_failed(self, error: StoreError, response: httpx.Response | None) -> OutcomeError:
        """The exception for a store that failed after an attempt was made: the attempt
        may have arrived, so never an error that says nothing has changed: an answer
        from the server (a refusal too, which it may keep under the key) shows that
        something reached it."""
        reached = self.maybe_applied or self.last_status is not None
        outcome = Outcome(
            operation_id=self.operation_id,
            key=self.key,
            state=State.INDETERMINATE if reached else State.NOT_SENT,
            attempts=self.total_attempts,
            response=response,
            evidence=f"{self.evidence}; the store could not record it: {error.reason}",
            not_before=self.not_before,
            maybe_applied=self.maybe_applied,
            last_status=self.last_status,
        )
        if response is not None:
            response.extensions[OUTCOME] = outcome
        self.tell(outcome)
        failure = unsettled_error(outcome, f"the store {error.path!r} failed")
        failure.__cause__ = error
        return failure

    def busy_outcome(self, record: OperationRecord) -> OutcomeError:
        outcome = self._unsettled_outcome(
            record, f"held by {record.lease_owner} until {record.lease_expires}"
        )
        self.tell(outcome)
        doing = "looked up on the server" if record.lease_look_up else "sent"
        return Indeterminate(
            f"operation {record.operation_id!r} (key {record.key}) is being {doing} by"
            f" another caller ({record.lease_owner}) and did not finish within the deadline",
            outcome,
        )

    def _unsettled_outcome(self, record: OperationRecord, evidence: str) -> Outcome:
        return from_record(
            record,
            evidence=evidence,
            maybe_applied=True,
            from_store=False,
            body_omitted=False,
            last_status=self.last_status,
        )


def clock_went_back(store: OperationStore, step: float, *, now: float, seen: str) -> int:
    """Keep, in `store`, that a clock of its users went back `step` seconds to `now`
    (seen as `seen` says): its unfinished operations are of unknown age from now on,
    and once they may have been applied are looked up rather than sent again."""
    marked = store.clock_went_back(step=step, now=now)
    logger.warning(
        "the clock went back %.0fs (seen %s): %d unfinished operation(s) of the store %s"
        " are of unknown age now: once they may have been applied, they are looked up"
        " rather than sent again",
        step,
        seen,
        marked,
        store.path,
        extra=log_fields("clock_went_back", step=step, marked=marked),
    )
    return marked


def keep_step(settings: Settings, step: float, *, seen: str) -> int:
    """`clock_went_back` for a step the settings' watch saw; once the store has it, the
    watch stops reporting it (a store that failed to take it is asked again)."""
    marked = clock_went_back(settings.store, step, now=settings.clock.time(), seen=seen)
    if settings.watch is not None:
        settings.watch.kept(step)
    return marked


def check_store_clock(store: OperationStore, clock: Clock) -> float:
    """As a client or transport starts: note the clock's time in the store, and keep a
    step back if it reads earlier than the latest time the store has seen (this clock,
    or another user's, went back). Returns that latest time (0.0 for a new store)."""
    now = clock.time()
    seen = store.advance_clock(now=now)
    step = ahead(seen, now)
    if step:
        clock_went_back(store, step, now=now, seen="at a start, against the store's times")
    return seen


def _error_name(error: BaseException) -> str:
    """An error's class by its full name, as OpenTelemetry's `error.type` wants it."""
    kind = type(error)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


#: Appended to the evidence of an operation the retry budget stopped.
BUDGET_STOP = "; stopped by the client's retry budget"
_REFUSALS = frozenset({AttemptKind.REJECTED, AttemptKind.KEY_CONFLICT})


_EVIDENCE_STATUS = re.compile(r"HTTP (\d{3})\b")


def _status_in(evidence: str) -> int | None:
    """The status of the last answer an operation's evidence names (``HTTP 500 ...``),
    if it names one; calls cut short since, which sent nothing, change nothing of it."""
    found = _EVIDENCE_STATUS.match(_seen_before(evidence))
    return int(found.group(1)) if found else None


def bound_body(response: httpx.Response, remaining: Callable[[], float]) -> None:
    """Make reading `response`'s body give up once `remaining()` is spent."""
    response.stream = _DeadlineStream(response.stream, remaining)


class _DeadlineStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that stops at the call's deadline.

    httpx's read timeout bounds each read, not the body: a server dripping one byte at a
    time would hold the call (and its lease) as long as it likes. Between reads this
    checks the deadline, and past it gives up as a read timeout would: the answer did
    not arrive whole, so the operation may have been applied and has no answer.
    """

    def __init__(
        self,
        inner: httpx.SyncByteStream | httpx.AsyncByteStream,
        remaining: Callable[[], float],
    ) -> None:
        self._inner = inner
        self._remaining = remaining

    def _check(self) -> None:
        if self._remaining() <= 0:
            raise httpx.ReadTimeout(
                "the deadline passed while the answer's body was still arriving"
            )

    def __iter__(self) -> Iterator[bytes]:
        assert isinstance(self._inner, httpx.SyncByteStream)
        for chunk in self._inner:
            self._check()
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        async for chunk in self._inner:
            self._check()
            yield chunk

    def close(self) -> None:
        if isinstance(self._inner, httpx.SyncByteStream):
            self._inner.close()

    async def aclose(self) -> None:
        if isinstance(self._inner, httpx.AsyncByteStream):
            await self._inner.aclose()
