"""The faults the checker injects: at the server, and between the client and the server.

At the server (`FAULTS`, told to the reference server through its fault API, for its
next request): 429/503 with Retry-After as seconds, a date, milliseconds or garbage; a
5xx outside the retry set; a 3xx; a 401 that an auth flow answers; apply-then-drop; an
answer held past the attempt's timeout; a body that never finishes; an external system
that times out, is down, applies then times out, or declines.

Between the client and the server (`Between`, at the checker's wire, `world.Wire`):

- a scripted refusal (`REFUSALS`, 400 and 409), a refusal of a request the server never
  admitted. Where the profile's server answers a key it holds from the key
  (`Setup.answers_from_the_key`), it is given only to a key the server does not hold
  (there a refusal after an attempt that may have been applied is the stored answer, by
  design);
- a refusal to a key the server holds (`held_refusal_statuses`): what a firewall, CDN or load
  balancer in front of the server answers as readily as the server (403, 404), under
  every profile; and 400 or 409 where the server does not answer a held key from it;
- the answer lost after the server acted on the request (`LOST`): a gateway's 5xx (500,
  502, 504, 520, 524) in its place, a read timeout, a connection reset, or the server's
  own apply-then-drop (never a 503: see `LOST`); and then, maybe (`THEN`), the network
  down for the next attempts (they fail to connect: nothing of them reaches the
  server), or the server asking for an hour's wait (503 with Retry-After 3600 s,
  nothing processed), or for 58 s (429), a wait the client honours that no longer fits
  the deadline: the shapes in which a call ends having sent an attempt that was
  applied and nothing after it reached the server, where telling `NotSent` would be
  wrong.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import TYPE_CHECKING

import httpx

from idemclient.testing import ReferenceServer

from .told import reference_in, server_rows

if TYPE_CHECKING:
    from .machine import Setup
    from .world import World

#: Faults the server can be told to inject on its next request, by readable name.
FAULTS = (
    "429 retry-after 2s",
    "503 retry-after 1s",
    "503 retry-after date",
    "503 retry-after past date",
    "503 retry-after garbage",
    "429 retry-after-ms 700",
    "503 retry-after 3600s",
    "500",
    "501",
    "520",
    "524",
    "301",
    "307",
    "401 auth refresh",
    "400",
    "409",
    "apply then drop",
    "held answer 60s",
    "slow body",
    "ext1 timeout",
    "ext2 timeout",
    "ext1 down",
    "ext2 down",
    "ext1 apply then timeout",
    "ext2 apply then timeout x2",
    "ext1 decline",
    "ext2 decline",
)
#: Faults that leave the server's next payment pending, answered 202 with its outcome
#: unknown (an external system down, or its answer lost and the probe's too): among
#: FAULTS' many, too rarely drawn for a bounded run to reach a 202 (a client taking one
#: for a success passed it); `PaymentsMachine.payment_left_pending` draws them as often
#: as any rule.
PENDING = ("ext1 down", "ext2 down", "ext2 apply then timeout x2")
#: Scripted refusals: the server refusing a request before admitting it (see
#: `Setup.answers_from_the_key`).
REFUSALS = ("400", "409")
#: How the answer to a request the server acted on is lost on its way back. Never as a
#: 503: a 503 says that nothing was done (the client reads it so, and the reference
#: server answers an outage after admission with a 202, never a 503), so a 503 after
#: the server acted is outside what the client is asked to see (an assumption, in
#: machine.py and docs/reliability.md).
LOST = (
    "500",
    "502",
    "504",
    "520",
    "524",
    "read timeout",
    "connection reset",
    "dropped by the server",
)
#: What happens to the attempts after it: nothing, the network down for them, the
#: server asking for a wait longer than the client honours (`max_retry_after`, a
#: minute), or for one it honours that no longer fits the call's deadline once the lost
#: answer's read timeout has taken its share (the call must stop, not sleep past it).
THEN = ("nothing", "network down", "503 retry-after 3600s", "429 retry-after 58s")
#: Refusals a firewall, CDN or load balancer in front of the server gives as readily
#: as the server, given to a key the server holds under every profile.
EDGE_STATUSES = (403, 404)


#: The phrases of the statuses a gateway gives that `http.HTTPStatus` does not name (a
#: CDN's 520 and 524).
GATEWAY_PHRASES = {520: "Web Server Returned an Unknown Error", 524: "A Timeout Occurred"}


def phrase(status: int) -> str:
    """The reason phrase of `status`, a gateway's own too (`GATEWAY_PHRASES`)."""
    return GATEWAY_PHRASES.get(status) or HTTPStatus(status).phrase


def held_refusal_statuses(setup: Setup) -> tuple[int, ...]:
    """The refusals given to a key the server holds under `setup`'s profile: the edge's,
    and where the server does not answer a held key from it, any refusal."""
    if setup.answers_from_the_key:
        return EDGE_STATUSES
    return (*EDGE_STATUSES, 400, 409)


def inject(server: ReferenceServer, fault: str, slow_bodies: list[int]) -> None:
    """Tell the server to misbehave on its next matching request, as named in FAULTS."""
    path = None  # whichever request comes next, payments or payouts
    words = fault.split()
    if fault == "apply then drop":
        server.drop()
    elif fault == "held answer 60s":
        server.delay(60.0)
    elif fault == "slow body":
        slow_bodies[0] += 1
    elif words[0] in ("ext1", "ext2"):
        system = int(words[0][-1])
        times = 2 if fault.endswith("x2") else 1
        mode = "_".join(w for w in words[1:] if w != "x2")
        server.external_fault(system, mode, times=times)
    elif fault.startswith("401"):
        server.answer(401, path=path, headers={"www-authenticate": 'Bearer realm="psp"'})
    elif words[0] in ("301", "307"):
        location = {"location": "https://psp.test/v1/elsewhere"}
        server.answer(int(words[0]), path=path, headers=location)
    elif "retry-after-ms" in fault:
        server.answer(int(words[0]), path=path, retry_after_ms=int(words[-1]))
    elif fault.endswith("past date"):
        server.answer(int(words[0]), path=path, retry_after_date_in=-30.0)
    elif fault.endswith(" date"):
        server.answer(int(words[0]), path=path, retry_after_date_in=2.0)
    elif fault.endswith("garbage"):
        server.answer(int(words[0]), path=path, retry_after="soon, maybe")
    elif "retry-after" in fault:
        server.answer(int(words[0]), path=path, retry_after=float(words[-1].rstrip("s")))
    else:
        server.answer(int(words[0]), path=path)


def problem(status: int, request: httpx.Request, detail: str) -> httpx.Response:
    """An answer of `status` with a problem+json body saying `detail`."""
    body = {
        "type": "https://idemclient.dev/problems/scripted",
        "title": phrase(status),
        "status": status,
        "detail": detail,
    }
    return httpx.Response(
        status,
        headers={"content-type": "application/problem+json"},
        content=json.dumps(body).encode(),
        request=request,
    )


class Between:
    """What lies between the clients and the server: the scripted refusals, the
    refusals at the edge, the answers lost after the server acted, the network going
    down. Each waits for the next operation request (a POST) it may be given to."""

    def __init__(self, world: World, setup: Setup, server: ReferenceServer, client: str) -> None:
        self._world = world
        self._setup = setup
        self._server = server
        self._client = client
        #: scripted refusals (REFUSALS) waiting for a request the server may refuse
        self.refusals: list[int] = []
        #: refusals waiting for a request under a key the server holds
        self.held_refusals: list[int] = []
        #: answers to be lost after the server acted (LOST), each with what follows it
        #: (THEN), oldest first
        self.lost: list[tuple[str, str]] = []
        #: operation requests still to fail to connect
        self.down = 0
        #: the references a scripted refusal (REFUSALS) was given to: a `failed` there
        #: is the server's refusal, explained
        self.refused: set[str] = set()

    def clear(self) -> None:
        """The faults stop."""
        self.refusals.clear()
        self.held_refusals.clear()
        self.lost.clear()
        self.down = 0

    def before(self, request: httpx.Request) -> httpx.Response | None:
        """Called as `request` leaves for the server: an answer given here is given
        instead of the server's (the server never sees the request); an error raised
        here is the client's."""
        if request.method != "POST":
            return None
        if self.down > 0:
            self.down -= 1
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        key = self._setup.key_in(request)
        held = key is not None and self._holds(key)
        if self.held_refusals and held:
            status = self.held_refusals.pop(0)
            return problem(status, request, "refused in front of the server")
        if not self.refusals:
            return None
        if self._setup.answers_from_the_key and held:
            return None  # the server answers its key from what it holds: the refusal waits
        status = self.refusals.pop(0)
        reference = reference_in(request)
        if reference is not None:
            self.refused.add(reference)
        return problem(status, request, "a scripted refusal: the request was not admitted")

    def after(self, request: httpx.Request, response: httpx.Response) -> httpx.Response:
        """Called with the server's answer to `request`, once it has acted on it: the
        answer that goes back instead (or the error raised instead)."""
        if request.method != "POST" or not self.lost:
            return response
        how, then = self.lost.pop(0)
        if then == "network down":
            self.down = max(self.down, NETWORK_DOWN_FOR)
        elif "retry-after" in then:
            asked, _, seconds = then.split()
            self._server.answer(int(asked), retry_after=float(seconds.rstrip("s")))
        if how == "read timeout":
            timeouts = request.extensions.get("timeout") or {}
            self._world.advance(float(timeouts.get("read") or 0.0))
            raise httpx.ReadTimeout("timed out", request=request)
        if how == "connection reset":
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        if how == "dropped by the server":
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        status = int(how)
        page = f"<html><body><h1>{status} {phrase(status)}</h1></body></html>"
        return httpx.Response(
            status, headers={"content-type": "text/html"}, content=page.encode(), request=request
        )

    def _holds(self, key: str) -> bool:
        return bool(server_rows(self._server, self._client, key))


#: How many operation requests in a row fail to connect once the network goes down:
#: every attempt the checker's policy allows a call.
NETWORK_DOWN_FOR = 4
