"""What the client promises about time, held to the wire and the world's true time.

The ledger shows a bug of timing only when the model's server happens to punish it: a
retry sent before the server's `Retry-After` is answered like any other, a call that
sleeps an hour past its deadline still ends well, and a payment re-sent past its key's
retention is answered from the key by the model's server, which keeps keys its clock
tolerance longer than it says (an hour). So the checker holds the client to the
promises themselves:

1. **the deadline**: a call (`Client.post`, `AsyncClient.post`, a wrapped client's
   request) ends within its policy's deadline after it began, by true time: the client
   never sleeps a wait that does not fit, and cuts each attempt's timeout to the time
   left (`check_call`);
2. **the server's wait is a floor**: once the server answered a request 429 or 503 with
   a wait (`Retry-After` as seconds or an HTTP-date, `retry-after-ms`), no request of
   the same process under the same key leaves before that wait is over. A date is read
   on the clock of either side that lets the client go earlier (the client reads it on
   its own clock, which may be fast by the offsets the history gave it);
3. **the key retention**: no request under a key whose payment the server made reaches
   the server more than the path's key retention (the profile's) after the request that
   made the server first hold the key, by true time. A server that keeps keys as long
   as it says, on a right clock, has forgotten the key by then and pays again; the
   model's server keeps it longer (`SERVER_CLOCK_TOLERANCE`), so the ledger alone would
   never show it.

Each is judged as the request leaves (or the call ends); a broken one fails the history
like any other invariant (see `world.Wire`: the process stops there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

import httpx

from .told import server_rows

if TYPE_CHECKING:
    from idemclient.testing import ReferenceServer

    from .machine import Setup
    from .world import Clock, World

#: Statuses whose wait the client must honour before it sends under the key again.
WAITING = (429, 503)
#: Float slack when comparing instants of the world's time.
EPSILON = 1e-6


@dataclass
class Floors:
    """One process's floors: per key, the true time before which no request under it
    may leave (the server's wait), and what asked for it."""

    until: dict[str, tuple[float, str]] = field(default_factory=dict)


def server_wait(headers: httpx.Headers, *, now: float, offset: float) -> float | None:
    """The true time the server's wait in `headers` ends, or None (no usable wait):
    `now` is the world's true time, `offset` how far ahead of true time the clock that
    reads an HTTP-date may be."""
    millis = (headers.get("retry-after-ms") or "").strip()
    if millis.isdigit():
        return now + int(millis) / 1000.0
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    if value.isdigit():
        return now + int(value)
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when - offset


class Timing:
    """The promises of the module's docstring, for one history."""

    def __init__(
        self,
        world: World,
        setup: Setup,
        server: ReferenceServer,
        client: str,
        *,
        client_clock: Clock,
        server_clock: Clock,
    ) -> None:
        self._world = world
        self._setup = setup
        self._server = server
        self._client = client
        self._client_clock = client_clock
        self._server_clock = server_clock
        #: per key, the true time the latest request under it reached the server
        self._arrived: dict[str, float] = {}
        #: per key, the true time the request that made the server hold it arrived
        self._admitted: dict[str, float] = {}

    # -- the server's wait ----------------------------------------------------------------

    def answered(self, request: httpx.Request, response: httpx.Response, floors: Floors) -> None:
        """The answer `response` goes back to the process: a wait in it is a floor for
        that process's next request under the key."""
        if request.method != "POST" or response.status_code not in WAITING:
            return
        key = self._setup.key_in(request)
        if key is None:
            return
        offset = max(self._client_clock.offset, self._server_clock.offset)
        until = server_wait(response.headers, now=self._world.true, offset=offset)
        if until is None or until <= self._world.true:
            return
        kept = floors.until.get(key)
        if kept is None or until > kept[0]:
            floors.until[key] = (until, f"{response.status_code} {dict(response.headers)}")

    def leaving(self, request: httpx.Request, floors: Floors) -> None:
        """A request of the process leaves it: not before the server's wait."""
        if request.method != "POST":
            return
        key = self._setup.key_in(request)
        if key is None or key not in floors.until:
            return
        until, why = floors.until[key]
        early = until - self._world.true
        assert early <= EPSILON, (
            f"a request under {key} left {early:.3f} s before the server's wait was over"
            f" (it answered {why})"
        )

    # -- the key retention ----------------------------------------------------------------

    def reaching(self, request: httpx.Request) -> None:
        """A request reaches the server (nothing in front of it answered it): never under
        a key whose payment was made, past the key's retention."""
        if request.method != "POST":
            return
        key = self._setup.key_in(request)
        if key is None:
            return
        now = self._world.true
        if not server_rows(self._server, self._client, key):
            self._admitted.pop(key, None)  # never held, or reaped: admitted anew
        elif key not in self._admitted and key in self._arrived:
            self._admitted[key] = self._arrived[key]
        self._arrived[key] = now
        since = self._admitted.get(key)
        if since is None:
            return
        facts = self._setup.profile.resolve("POST", request.url.path, frozenset({"POST"}))
        made = self._setup.applied([e for e in self._server.ledger() if e.idempotency_key == key])
        age = now - since
        assert not made or age <= facts.key_retention, (
            f"a request under {key} reached the server {age:.0f} s after the server first"
            f" held the key, past its retention of {facts.key_retention:.0f} s, and the"
            f" payment was made ({made}): a server that keeps keys as long as it says"
            " has forgotten it, and pays again"
        )

    # -- the deadline ---------------------------------------------------------------------

    def check_call(self, door: str, began: float, *, deadline: float) -> None:
        """A call through `door` that began at true time `began` has just ended."""
        took = self._world.true - began
        assert took <= deadline + EPSILON, (
            f"a call through {door} took {took:.3f} s: past its deadline of {deadline:.0f} s"
        )
