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
from dataclasses import dataclass

import httpx

from . import _time
from ._classify import SUCCESSES, AttemptKind, Classification
from ._deadline import bound_body, cut_timeouts
from ._evidence import interrupted_before_sending
from ._frozen import fast_constructor
from ._hooks import AttemptEvent, StartEvent
from ._intent import intent_for
from ._outcome import Outcome, State
from ._settings import CALL_OPTIONS, CallOptions, Settings
from ._states import NEW, Event, after, stop
from ._store._base import Intent, OperationRecord, Progress
from ._time import ServerTime, in_flight_until, lease_until

__all__ = ["CONTINUATION", "Call", "Continuation"]

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


class Call:
    """The decisions of one call. Not thread-safe: one call, one thread or task.

    A call starts a new operation (or finds it again) from its request, or continues
    one that httpx sends on after a `Continuation` (a redirect, an auth flow).

    What a call has not learnt yet reads as the class's value (an attribute is set on
    the call only once it changes: a call that succeeds at once sets few).
    """

    last_status: int | None = None
    last_kind: AttemptKind | None = None
    total_attempts = 0
    maybe_applied = False
    #: when this call last sent an attempt that may have been applied
    sent_at: float | None = None
    #: the server's time then, by its `Date` (an upper bound), if this client knew it
    server_sent_at: float | None = None
    #: an answer read as a replay came that no attempt of ours explains (kept by the
    #: store for good: `OperationRecord.replay_unexplained`)
    replay_unexplained = False
    evidence = ""
    not_before: float | None = None
    created_at = 0.0
    #: the server's time when the operation was recorded (a lower bound), if known
    server_created_at: float | None = None
    record: OperationRecord | None = None
    settled = False
    on_wire = False
    reconcile_required = False
    #: the last answer was read as a replay that nothing of ours explains
    doubted = False
    cause: BaseException | None = None
    _busy_poll = _BUSY_POLL_FIRST
    challenge: httpx.Response | None = None
    #: the resource the last answer names as made under this key (GoCardless)
    existing: str | None = None
    #: the client's retry budget refused a retry of this call
    budget_spent = False
    #: the key of the outcome told (a re-issued operation's, from the store)
    key_told: str | None = None

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
        frame = settings.frame(request)
        self.resolved = frame.resolved
        #: scheme, host and port the request goes to (its servers' times are kept by it)
        self.origin = frame.origin
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

    def server_time(self, stamped: float) -> ServerTime | None:
        """The server's time now, by the latest `Date` its origin sent this client, to
        judge a stamp made at `stamped` (see `Settings.server_time`)."""
        return self.settings.server_time(self.origin, stamped=stamped)

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
        return times.at(self.origin, self.clock.monotonic())

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

    # -- each attempt ------------------------------------------------------------------

    def prepare(self) -> float | None:
        """Set up the next attempt; its timeout in seconds, or None if time is up."""
        remaining = self.remaining()
        if remaining <= 0:
            return None
        timeout = min(self.policy.attempt_timeout, remaining)
        cut_timeouts(self.request.extensions, timeout)
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
        self.on_wire = True
        self.attempts_here += 1
        self.total_attempts += 1
        return self.request

    def reads_first(self, response: httpx.Response) -> bool:
        """The answer's body must be read before it can be classified: its status
        alone does not say what it means under this profile (an error code)."""
        return response.status_code in self.profile.needs_codes

    @property
    def keeps_answer(self) -> bool:
        """The last answer is kept with the unsettled operation: read as a replay that
        nothing of ours explains, it is the application's refusal if a look-up finds
        no payment, and then the operation's final answer (`_reconcile.apply`)."""
        return self.doubted

    def bound_body(self, response: httpx.Response) -> None:
        """Make reading `response`'s body give up at the deadline (see `_DeadlineStream`)."""
        bound_body(response, self.remaining)

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
        if self.on_wire:
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
        return _new_progress(
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


#: `Progress(...)`, built as the class builds it without a call per field (`_frozen`).
_new_progress = fast_constructor(Progress)
