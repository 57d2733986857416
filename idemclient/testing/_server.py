"""`ReferenceServer`: the sandbox PSP as one object, with its fault and inspection API.

Here the layers are put together: it owns the storage, the clock, the fault scripts,
the two external systems and the webhook deliverer (which sends the events its
resources queue, see `_machine.webhooks`), and puts the phase machine and the
`/_sandbox/` control endpoints behind one `handle`. Every adapter (the httpx transport,
respx, the ASGI app, the live server) talks to it through that one method, so
in-process and over-the-socket behaviour cannot drift.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from email.utils import formatdate
from types import TracebackType

import httpx

from .._profile import Profile
from ..clock import ManualClock
from ._adapters.transport import ReferenceTransport
from ._machine.clock import ServerClock
from ._machine.control import handle_control
from ._machine.core import Core
from ._machine.external import ExternalMode, ExternalSystem
from ._machine.faults import Answer, Crash, Delay, FaultPlan, Gate
from ._machine.records import (
    KeyRecord,
    LedgerEntry,
    RecoveryReport,
    WebhookEventRecord,
    WebhookReport,
)
from ._machine.webhooks import DEFAULT_MAX_ATTEMPTS, STANDARD_WEBHOOKS, Deliverer, WebhookFault
from ._protocol.dialect import Dialect, dialect_for
from ._protocol.messages import DropConnection, ServerRequest, ServerResponse
from ._protocol.rules import Phase, Problem, check_target
from ._storage.backend import open_storage

__all__ = ["DEFAULT_CLOCK_TOLERANCE", "DEFAULT_KEY_TTL", "DEFAULT_LEASE", "ReferenceServer"]


def http_date(when: float) -> str:
    """`when` (seconds since the epoch) as an HTTP-date, e.g.
    ``Wed, 02 Dec 2026 06:00:00 GMT``."""
    return formatdate(when, usegmt=True)


#: How long an attempt may go silent before another actor may take its request over.
DEFAULT_LEASE = 30.0
#: How long finished keys are kept under the `reference` profile: Stripe's 24 hours.
DEFAULT_KEY_TTL = 24 * 3600.0
#: How far the clocks of the servers sharing a database (and this server's clock from
#: one reading to the next) may disagree without a key being reaped before its TTL.
DEFAULT_CLOCK_TOLERANCE = 0.0


class ReferenceServer:
    """The server half of the idempotency protocol, stateful, with fault injection.

    `db` is a SQLite path, ":memory:", or a `postgresql://` URL (the seed's schema, the
    key table partitioned by day; see docs/server.md). `clock` defaults to a
    `ManualClock`, so leases and TTLs expire only when a test advances it; such a
    server sends no `Date` (its time is a sandbox's, not the time a client on the real
    clock reads: given one, a client would judge its operations weeks old). Given a
    clock, every answer carries one `Date` from it. With
    `sandbox=False` the `/_sandbox/` endpoints answer 404 (the Python API below still
    works).

    `clock_tolerance`: finished keys are reaped `key_ttl + clock_tolerance` after they
    were stamped, so that servers whose clocks disagree by up to that much (or a clock
    stepped forward by that much) never drop a key before the TTL a client counts on.
    With the default, 0, what is tolerated is the client's own margin (300 s, for the
    client's and the server's clocks together); see docs/server.md.

    `external_retention`: how long the two simulated external systems honour a derived
    key (None, the default: for ever). Past it, a payment sent again after the server
    forgot its key moves money again, and shows in the ledger as a second effect.

    `profile` is the server profile it speaks (a built-in's name, or a `Profile`; see
    `idemclient.profiles`): where it reads the key, what a key may be, and how it
    answers a replay, a request still running, a key reused with another request, and
    a key used before, as that provider does. The default, `reference`, is this
    server's own protocol. `key_ttl` is when the reaper deletes finished keys: by
    default the profile's longest key retention (a profile forgets a key past its
    endpoint's retention when the key comes again, reaped or not).
    """

    def __init__(
        self,
        *,
        db: str | os.PathLike[str] = ":memory:",
        clock: ServerClock | None = None,
        lease: float = DEFAULT_LEASE,
        key_ttl: float | None = None,
        clock_tolerance: float = DEFAULT_CLOCK_TOLERANCE,
        external_retention: float | None = None,
        sandbox: bool = True,
        webhook_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        webhook_timeout: float = 10.0,
        profile: str | Profile = "reference",
    ) -> None:
        self._dialect: Dialect = dialect_for(profile)
        if key_ttl is None:
            key_ttl = self._dialect.longest_retention
        self._clock: ServerClock = clock if clock is not None else ManualClock()
        #: a clock given by the test is the server's time, sent as `Date`; the default
        #: one starts at a fixed instant unrelated to today, and is not sent
        self._dated = clock is not None
        self._storage = open_storage(db)
        self._deliverer = Deliverer(
            self._storage, self._clock, max_attempts=webhook_max_attempts, timeout=webhook_timeout
        )
        self._faults = FaultPlan()
        try:
            self._externals = (
                ExternalSystem(1, self._storage, self._clock, retention=external_retention),
                ExternalSystem(2, self._storage, self._clock, retention=external_retention),
            )
            self._core = Core(
                storage=self._storage,
                clock=self._clock,
                faults=self._faults,
                externals=self._externals,
                lease=lease,
                key_ttl=key_ttl,
                dialect=self._dialect,
                webhook_lifecycle=self._deliverer.lifecycle,
                clock_tolerance=clock_tolerance,
            )
        except BaseException:
            self._storage.close()
            raise
        self.sandbox = sandbox
        #: an httpx transport (sync and async) answered by this server, in-process
        self.transport = ReferenceTransport(self)

    # -- serving -------------------------------------------------------------------------

    @property
    def clock(self) -> ServerClock:
        return self._clock

    @property
    def profile(self) -> Profile:
        """The server profile this server speaks."""
        return self._dialect.profile

    @property
    def lease(self) -> float:
        return self._core.lease

    @property
    def key_ttl(self) -> float:
        return self._core.key_ttl

    @property
    def clock_tolerance(self) -> float:
        return self._core.clock_tolerance

    def handle(self, request: ServerRequest) -> ServerResponse | DropConnection:
        """Answer one request: the single entry point every adapter uses."""
        answer: ServerResponse | DropConnection
        try:
            # A NUL in the path or the query: refused alike whatever the backend (see
            # `_protocol.storable`), before anything looks it up.
            check_target(request.path, request.query)
        except Problem as problem:
            answer = problem.response()
        else:
            if request.path.startswith("/_sandbox/"):
                answer = handle_control(self, request)
            else:
                answer = self._core.handle(request)
        if self._dated and isinstance(answer, ServerResponse) and answer.header("date") is None:
            # An origin server with a clock sends its time (RFC 9110 section 6.6.1),
            # from the server's clock: a test that moves it moves what clients read.
            answer = dataclasses.replace(
                answer, headers=(*answer.headers, ("date", http_date(self._clock.time())))
            )
        return answer

    def respx_side_effect(self, request: httpx.Request) -> httpx.Response:
        """For `respx.route(...).mock(side_effect=server.respx_side_effect)`."""
        return self.transport.handle_request(request)

    # -- fault injection -----------------------------------------------------------------

    def answer(
        self,
        status: int,
        *,
        times: int = 1,
        path: str | None = None,
        key: str | None = None,
        retry_after: float | str | datetime | None = None,
        retry_after_date_in: float | None = None,
        retry_after_ms: int | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> None:
        """Answer the next `times` matching requests with `status`, without processing them.

        `retry_after`: seconds (number), an HTTP-date (aware datetime) or a raw string;
        `retry_after_date_in`: an HTTP-date that many seconds after the server's now;
        `retry_after_ms`: a `retry-after-ms` header. `body` defaults to problem+json.
        """
        action = Answer(
            status,
            retry_after=retry_after,
            retry_after_date_in=retry_after_date_in,
            retry_after_ms=retry_after_ms,
            headers=tuple((headers or {}).items()),
            body=body,
        )
        self._faults.add(action, times=times, path=path, key=key)

    def delay(
        self, seconds: float, *, times: int = 1, path: str | None = None, key: str | None = None
    ) -> None:
        """Process the next matching requests, then hold each response `seconds`.

        In-process, a delay beyond the client's read timeout raises `httpx.ReadTimeout`
        after the request was applied; over a socket the server really waits, until
        then or until the client closes its connection (its timeout), whichever is first.
        """
        self._faults.add(Delay(seconds), times=times, path=path, key=key)

    def drop(self, *, times: int = 1, path: str | None = None, key: str | None = None) -> None:
        """Apply-then-drop: commit everything and store the response, then send nothing."""
        self._faults.add(Crash(Phase.FINISHED), times=times, path=path, key=key)

    def crash(
        self,
        after: Phase | str,
        *,
        times: int = 1,
        path: str | None = None,
        key: str | None = None,
    ) -> None:
        """Abandon the next matching creation right after phase `after` commits.

        The row stays started with its lease held, as a dead worker leaves it; the
        connection is broken without a response. Recovery (the worker, or a retry once
        the lease has expired) must finish it.
        """
        self._faults.add(Crash(Phase(after)), times=times, path=path, key=key)

    def external_fault(self, system: int, mode: ExternalMode | str, *, times: int = 1) -> None:
        """Make external system 1 or 2 misbehave for its next `times` interactions.

        Modes: "timeout", "down", "apply_then_timeout" (calls and status probes alike
        use up a count), and "decline" (the next `times` new instructions are declined).
        """
        self._external(system).inject(mode, times=times)

    def hold_external(self, system: int, *, timeout: float = 30.0) -> Gate:
        """Hold external system `system`'s next call until the returned gate is released."""
        return self._external(system).hold(timeout=timeout)

    def clear_faults(self) -> None:
        """Drop every scripted fault not yet used: on requests, external systems and
        webhook deliveries. Held external calls are released. Data stays."""
        self._faults.clear()
        self._deliverer.clear()
        for external in self._externals:
            external.clear()

    def pending_faults(self) -> int:
        """How many requests (and webhook deliveries) scripted faults will still affect."""
        return self._faults.pending() + self._deliverer.pending_faults()

    def _external(self, system: int) -> ExternalSystem:
        if system not in (1, 2):
            raise ValueError(f"there are external systems 1 and 2, not {system!r}")
        return self._externals[system - 1]

    # -- webhooks ------------------------------------------------------------------------

    def set_webhook_endpoint(
        self,
        url: str | None,
        *,
        secrets: Sequence[str] | None = None,
        client: str | None = None,
        transport: httpx.BaseTransport | None = None,
        scheme: str = STANDARD_WEBHOOKS,
        lifecycle: bool = False,
    ) -> tuple[str, ...]:
        """Deliver `client`'s webhook events (every client's, for None) to `url`.

        Signed as Standard Webhooks do (`scheme`; "idemclient-v1", the earlier headers,
        is deprecated) with each of `secrets` (``whsec_`` + base64; several during a
        rotation); one is generated when none is given. Returns the secrets.
        `lifecycle=True` announces each resource's life, `<kind>.created` then its
        final status, instead of the final status alone. `transport` delivers
        in-process (an `httpx.WSGITransport`, a `MockTransport`) instead of over the
        network. `url=None` removes the endpoint: events wait, pending, until there is
        one.
        """
        if isinstance(secrets, str):
            raise TypeError("secrets is a list of secrets, not one secret")
        return self._deliverer.set_endpoint(
            url,
            secrets_=None if secrets is None else tuple(secrets),
            client=client,
            transport=transport,
            scheme=scheme,
            lifecycle=lifecycle,
        )

    def deliver_webhooks(self, *, limit: int = 100) -> WebhookReport:
        """Run the delivery loop once: each due event gets one attempt, now.

        Due means pending and past its retry time on the server's clock; advance the
        clock to bring retries due. The live server runs this in the background.
        """
        return self._deliverer.deliver_once(limit=limit)

    def webhook_fault(
        self, mode: WebhookFault | str, *, times: int = 1, seconds: float = 0.0
    ) -> None:
        """Misbehave on the next `times` deliveries: "duplicate" (sent twice),
        "lose_ack" (the 2xx is ignored, so it comes again), "delay" (held back
        `seconds`, so later events overtake it), "reorder" (the next `times` passes
        send their batch shuffled), "reverse" (the next `times` passes send their
        batch newest first: a resource's final status before its creation)."""
        self._deliverer.add_fault(mode, times=times, seconds=seconds)

    def webhook_events(self) -> tuple[WebhookEventRecord, ...]:
        """Every webhook event queued so far, oldest first, with its delivery state."""
        return tuple(
            WebhookEventRecord(
                id=row.id,
                type=row.type,
                client=row.client,
                resource_id=row.resource_id,
                state=row.state,
                attempts=row.attempts,
                posts=row.posts,
                created_at=row.created_at,
                next_attempt_at=row.next_attempt_at,
                delivered_at=row.delivered_at,
                last_status=row.last_status,
                last_error=row.last_error,
                body=row.body.decode(),
            )
            for row in self._storage.events()
        )

    # -- time and maintenance ------------------------------------------------------------

    def now(self) -> float:
        """The server's current time (seconds since the epoch)."""
        return self._clock.time()

    def advance(self, seconds: float) -> float:
        """Move the server's clock forward; returns the new now."""
        return self._clock.advance(seconds)

    def recover(self) -> RecoveryReport:
        """Run the recovery worker once over started rows with an expired or released lease."""
        return self._core.recover_once()

    def reap(self) -> int:
        """Run the reaper once: drop finished keys older than the key TTL.

        On PostgreSQL it drops whole days once the whole day is older than the TTL, so
        a key is kept at least the TTL and at most a day more."""
        return self._core.reap_once()

    def reset(self) -> None:
        """Forget everything: keys, resources, external books, webhook events and pending
        faults. Webhook endpoints are configuration and stay."""
        self._faults.clear()
        self._deliverer.clear()
        for external in self._externals:
            external.clear()
        self._storage.reset()

    # -- inspection ----------------------------------------------------------------------

    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every resource with its effects at both external systems, oldest first."""
        entries = []
        for resource, state, point, counts, journal in self._storage.ledger_rows():
            entries.append(
                LedgerEntry(
                    resource_id=resource.id,
                    kind=resource.kind,
                    client=resource.client,
                    idempotency_key=resource.idempotency_key,
                    reference=resource.reference,
                    amount=resource.amount,
                    currency=resource.currency,
                    status=resource.status,
                    key_state=state,
                    recovery_point=point,
                    ext1_applied=counts[0],
                    ext2_applied=counts[1],
                    ext1_calls=counts[2],
                    ext2_calls=counts[3],
                    journal=tuple(journal),
                )
            )
        return tuple(entries)

    def key_record(self, client: str, key: str) -> KeyRecord | None:
        """The server's row for (client, key), or None."""
        row = self._storage.key_row(client, key)
        if row is None:
            return None
        return KeyRecord(
            client=row.client,
            key=row.key,
            endpoint=row.endpoint,
            state=row.state,
            recovery_point=row.recovery_point,
            resource_id=row.resource_id,
            response_code=row.response_code,
            response_body=None if row.response_body is None else row.response_body.decode(),
            locked_at=row.locked_at,
            attempts=row.attempts,
            last_attempt_at=row.last_attempt_at,
            created_at=row.created_at,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the gates, close the webhook connections and the database."""
        for external in self._externals:
            external.clear()
        self._deliverer.close()
        self._storage.close()

    def __enter__(self) -> ReferenceServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ReferenceServer(db={self._storage.path!r}, profile={self.profile.name!r},"
            f" lease={self.lease}, clock={self._clock!r})"
        )
