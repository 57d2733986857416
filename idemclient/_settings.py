"""What every call of a client shares: its store, policy, clock, hooks and profiles.

`Settings` is made once per client (and shared by its transports' mounts); `CallOptions`
is what a caller says about one operation beyond the HTTP request, carried to the
transport in the request's extensions.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import httpx

from ._budget import RetryBudget
from ._clock import Clock, StepWatch
from ._frame import Frame, Frames, Origin, origin_of
from ._hooks import Hooks
from ._hosts import ByHost
from ._policy import RetryPolicy, retention_set
from ._profile import Profile, Resolved
from ._server_time import ServerTimes
from ._store._interface import OperationStore
from ._time import ServerTime, watched
from .profiles import DEFAULT as DEFAULT_PROFILE

__all__ = ["CALL_OPTIONS", "CallOptions", "Settings", "origin_of"]

#: Request extension through which `Client` passes per-call options to the transport.
CALL_OPTIONS = "idemclient.call"


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
    #: each request's frame (its profile's facts and origin), by its URL object and
    #: method: asked by the exchange, the route, the call and each answer
    _frames: Frames = dataclasses.field(
        init=False, default_factory=Frames, repr=False, compare=False
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
            date, age = _date_and_age(response.headers)
            times.heard(self._frames.origin(request.url), date, self.clock.monotonic(), age)

    def server_time(self, url: httpx.URL | Origin, *, stamped: float) -> ServerTime | None:
        """The server's time now, by the latest `Date` from `url`'s origin (or the
        origin given), to judge a stamp made at `stamped`; None if none came (or it was
        garbled, or `server_times` is off), or the stamp was made since this client
        started watching its clock (it would have seen a step back since; see
        `watched`)."""
        times = self.server_times
        if times is None or self.watched(stamped):
            return None
        origin = url if isinstance(url, tuple) else origin_of(url)
        return times.at(origin, self.clock.monotonic())

    def watched(self, stamped: float) -> bool:
        """A stamp made at `stamped` was made while this client watched its clock
        (a step back since would have been seen and kept: `clock_went_back`), so this
        clock alone judges it, as it always did. Before that, no client may have been
        running, and the servers' `Date` is asked too (`_time.watched`)."""
        return watched(stamped, since=self.watched_since)

    def profile_at(self, url: httpx.URL) -> Profile:
        """The profile a request to `url` speaks: the chosen one, else its host's
        provider's, else the default (see `_hosts`)."""
        return self.profile if self.hosts is None else self.hosts.at(url.host)[0]

    def resolve(self, request: httpx.Request) -> Resolved:
        """The profile's facts for `request` (its endpoint's, where they differ)."""
        return self.frame(request).resolved

    def frame(self, request: httpx.Request) -> Frame:
        """`request`'s frame: the profile's facts for it and its origin. Asked of one
        request several times on its way (the exchange, the route, the call), found
        once for its URL object and method (see `Frames`)."""
        method, url = request.method, request.url
        found = self._frames.get(url, method)
        if found is None:
            found = self._frames.keep(Frame(url, method, self.resolve_url(method, url)))
        return found

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


def _date_and_age(headers: httpx.Headers) -> tuple[str | None, str | None]:
    """The `Date` and `Age` of an answer, as `headers.get` reads each (repeats joined),
    in one pass over the raw headers and without a `KeyError` for one that is missing
    (most answers carry no `Age`)."""
    date = age = None
    for name, value in headers.raw:
        lowered = name.lower()
        if lowered == b"date":
            date = value if date is None else date + b", " + value
        elif lowered == b"age":
            age = value if age is None else age + b", " + value
    if date is None and age is None:
        return None, None
    encoding = headers.encoding
    return (
        None if date is None else date.decode(encoding),
        None if age is None else age.decode(encoding),
    )
