"""The model-based checker: generated histories of a payment client, its store and the
reference server, and one invariant over them.

Each rule is one thing that happens to the system: an application process issues an
operation (through `Client`, `AsyncClient`, `wrap()` or the batch API; by operation id
or by a uuid5 identity), issues it again, resumes, reconciles; a process dies at its
n-th event (a store write, a request leaving, an answer arriving); the disk fills up at
the intent or the outcome commit; the server is told to misbehave on its next request,
or something between the client and the server does (faults.py: throttles, 5xx, 3xx,
401s, refusals, to a key the server holds too, an answer lost after the server acted
on the request, the network down, external systems timing out or declining); the
server crashes after any phase and its recovery worker runs; time passes (leases lapse,
keys age); the client's and the server's clocks jump forward and back; the server reaps
old keys; an operator purges finished operations from the client's store.

The server speaks one server profile and every client is built with the same one
(`PaymentsMachine` speaks `reference`; `PaymentsMachine.for_profile(name)` another
built-in); what the machine needs of the profile is derived from its fields (`Setup`).

Each application process is a new client on the same store file: nothing survives a
process but the file. Everything runs in this thread (the async client's store calls
in anyio's worker threads, one at a time), on one timeline (`world.World`), so a
failing history shrinks and replays.

The invariant, after every step, against the server's ledger and the store:

1. no operation is ever applied more than once (one resource per reference, at most;
   where the server keeps no refusal under its key, declined ones do not count);
2. `succeeded` means applied exactly once; `not_sent` means never applied; `failed`
   means no payment went through (none, or one the external system declined);
3. an operation keeps the key it was first recorded with;
4. a stored final answer from the server equals the one the server keeps for the key;
5. no secret (the bearer token) is ever in the store's bytes;
6. what every caller was told (told.py): `succeeded`, the payment made once and named
   in the answer; `failed`, nothing made under the key, now or later; `NotSent`,
   nothing under the key ever reached the server: no key row, nothing in the ledger,
   judged before the next request under the key reaches the server and at the end once
   the server's recovery has run, before anything is sent again; a refusal
   (`OperationMismatch`, a batch row refused) or a `StoreError`, nothing of it sent;
7. what the client promises of time (timing.py), which the ledger shows only when the
   model's server happens to punish it: a call ends within its deadline; once the
   server asked for a wait (`Retry-After`, `retry-after-ms`), the process sends
   nothing under that key before it is over; no request under a key whose payment
   was made reaches the server past the key's retention since the server first held
   it (the model's server keeps keys an hour longer, its clock tolerance, so a re-send
   there is answered from the key; a server that keeps them as long as it says pays
   again);
8. while a paused process holds an operation's lease, no other process sends under
   its key before the lease ends (`owner_paused_then_taken_over` pauses it, among
   other spans, until a second before that end): two senders at once, which a server
   that runs both pays twice for (the model's server runs one request at a time, so
   the ledger alone never shows it);

and at the end of every history, once the faults stop and the server's recovery has
run, `resume()` and then `reconcile()` settle every operation in agreement with the
ledger: applied once and `succeeded`, or never applied and `not_sent`/`failed`
(`Indeterminate` ends there, in agreement with the ledger). Then liveness: the
application issues again what it has no answer for (never recorded, or not sent), and
every operation it issued ends `succeeded`, or `failed` for a reason the history
explains (a scripted refusal, a decline), or was purged: nothing silently never paid.

The assumptions it rests on (no generated history leaves them):

- the server keeps keys for the retention it advertises (the client's profile's key
  retention, `reference`'s 24 hours, is the server's key TTL), on a clock within its
  stated `clock_tolerance` (`SERVER_CLOCK_TOLERANCE`; its offsets, `SERVER_OFFSETS`,
  stay inside it);
- the client's clock may be off by any amount, fast or slow, and be set right; a step
  back of more than `CLOCK_SKEW` taken by `client_clock_jumps` is seen by a client that
  runs across it: the rule runs one across it. (One that starts after it sees it
  only while the clock is behind the store's latest times, and a store idle for days
  may be further behind than the step.) A right clock (within `CLOCK_SKEW` of true
  time) may be stepped wrong, back or forward to any of `WRONG_CLIENT_OFFSETS`, while
  no client runs and keys may be in flight, under every profile
  (`client_clock_steps_unseen`): what it stamped while right is judged by the server's
  `Date` too, which a client asks before sending a maybe-applied operation again (the
  machine's clients are built with `time_probe=True`; on a machine whose clients are
  built by default, `for_profile(name, time_probe=False)`, unseen steps are not drawn:
  by default no request is made to learn the time, and such a step is outside, see
  docs/reliability.md).
  Unseen steps are drawn only from a right clock: a clock made wrong is set right
  again by `client_clock_jumps` (back: run across; forward, from slow: as below). A
  clock fast then set right while no client ran leaves the record's own stamp wrong,
  which only the server's time kept with the record shows (the client asks it before
  a client's first operation); that history is kept in test_histories.py;
- purging an operation is an operator's explicit act, after which the application
  does not issue it again;
- the server's recovery worker runs at least every `SWEEP_EVERY`: a stranded
  instruction is resumed while the external systems (which forget keys after
  `EXTERNAL_RETENTION`) still remember it. Past that the server leaves it for an
  operator; it never calls twice (tests/server/test_honest_server.py);
- a scripted refusal (`REFUSALS`) is the server refusing a request it did not admit:
  where the profile's server answers a key it holds from the key
  (`Setup.answers_from_the_key`), it is given only to a key the server does not hold
  (there the client takes a refusal after an attempt that may have been applied as the
  stored answer, by design); to a key it holds, only what something in front of the
  server gives as readily (403, 404: `edge_refuses_a_held_key`);
- a 503 says that nothing was done: it is never given after the server acted on the
  request (`faults.LOST` has every other 5xx). The client reads a 503 as never applied,
  and the reference server answers an outage after admission with a 202, so as not to
  say otherwise;
- `client_clock_jumps` steps the client's clock forward by more than `CLOCK_SKEW` only
  while the server holds no key in flight, which is an assumption for a step from a
  wrong clock (from slow to right, or from one wrong offset to another): what a slow
  clock stamped looks older than it is by both clocks once the clock is set forward,
  where no client can see it (as the fast clock set right above), so the in-flight
  hold, and a look-up's "none" after a dead owner's lease (whose send has no server
  time kept), end early. Under every profile since the application reconciles at once
  (a look-up's "none" is judged by the same window as the hold; found deep, adyen,
  seed 22). A step forward from a right clock is generated with keys in flight
  (`client_clock_steps_unseen`): the client holds until the hold is over by the
  server's `Date` too. That holds only as far as the server's clock is right, within
  `CLOCK_SKEW`, the slack the client gives the `Date` it reads (its hosts' clock
  skew): so an unseen step is drawn only while the server's clock is within
  `CLOCK_SKEW / 2`, and the server's clock stays so while the client's is wrong from
  one. (The record keeps the server's time at the send, so a server clock off by a
  constant amount, half an hour say, no longer ends the hold early: that history is
  kept in test_histories.py and pays once. What the assumption still keeps out is the
  server's clock stepping between the send and the judgement while the client's was
  stepped unseen: two clocks wrong at once; found again, for a look-up, deep in ietf,
  seed 42);
- the store is lost (`store_lost`) only while the server holds no key in flight: a row
  the new store does not know has no send time to hold it by, nor a send to make a
  refusal after it doubtful, so a batch run again while the server still runs the
  row's key sends it beside it (where the server does not guard a key in flight: paid
  twice, found deep in square) or takes a refusal in front of the server for the
  row's answer (found deep in ietf). After a loss the application runs its batches
  again (their rows are found by look-up); payments by operation id or a caller's
  identity are not issued again (a new store gives an operation id a new key, and the
  server may have forgotten an identity's): an operator reconciles them.
- every process of a history is a client in this one OS process: a killed one's calls
  end with it (its leases are seen free at once, as `_owners` sees a call of this
  process that has ended), so the check that another process's pid is gone is never
  what frees a lease here (tests/client/test_ownership.py kills real processes);
- a process dies as a SIGKILL kills it, never as a power loss: what the store wrote
  reaches the file whether or not it was flushed to the disk (the intent's flush is
  proven by tests/integration/test_intent_flushed.py, with strace);
- the server answers every request with a `Date`, so the client always has the
  server's time beside its own: an operation's age misjudged by the host's clock alone
  (a step back it did not notice) is measured right by the server's, and shows only
  against a server that gives no `Date` (tests/integration/test_time_boundaries.py
  holds each judgement on its own, a second either side);
- the server runs one request at a time, to its end, before the next reaches it, so a
  second sender while the first's request runs is seen by invariant 8, not in the
  ledger;

Generated with nothing holding them back: the application re-issues, resumes and
reconciles at once, a paused process goes on at once (where the profile's server does
not guard a key in flight, the client itself holds a maybe-applied operation for the
profile's `in_flight_for`, `Call.hold_in_flight`, and a look-up's "none" counts only
after it), an operation is issued again with another body (it must be refused before
anything is sent), the store file is lost, and a refusal reaches a key the server holds.

Outside them: a server clock further off than its tolerance reaps keys early; a
re-send after the key is gone pays twice. Not generated. (A record stamped by a client
clock running wrong, set right while no client ran, is seen by the server's time kept
with it; the history that showed the fast clock's is kept in test_histories.py.)
Operations purged by the operator are not issued again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from idemclient import (
    AsyncClient,
    Client,
    IdemError,
    Outcome,
    OutcomeError,
    RetryPolicy,
    State,
    key_from_identity,
    outcome_of,
    wrap,
)
from idemclient._server_time import DATE_RESOLUTION
from idemclient._states import may_follow
from idemclient._store import _owners
from idemclient._time import CLOCK_SKEW
from idemclient.batch import BatchInvalid, Report, read_batch, submit
from idemclient.errors import OperationMismatch
from idemclient.profiles import BUILTIN, Profile, named
from idemclient.store import SQLiteStore
from idemclient.testing import LedgerEntry, Phase, ReferenceServer

from ..profiles.server_speakers import PATH as SPEAKER_PATHS
from . import told as claims
from .faults import (
    FAULTS,
    LOST,
    PENDING,
    REFUSALS,
    THEN,
    Between,
    held_refusal_statuses,
    inject,
)
from .timing import Floors, Timing
from .world import (
    INTENT_WRITES,
    OUTCOME_WRITES,
    Clock,
    Death,
    Fate,
    MortalStore,
    RefreshingAuth,
    Wire,
    World,
    store_bytes,
)

TOKEN = "sk_live_checker_secret_7d1f"
BASE = "https://psp.test"
LEASE = 30.0
KEY_TTL = 24 * 3600.0
DAY = 24 * 3600.0
WAYS = ("client", "async", "wrap", "batch")
#: The door each way's caller is told through.
DOORS = {"client": "Client.post", "async": "AsyncClient.post", "wrap": "wrap", "batch": "batch"}
#: Where a batch pays: `submit`'s own default, served as payouts under every profile.
PAYOUTS = "/v1/payouts"
BY_REFERENCE = "{path}?reference={reference}"
BY_KEY = "{path}?idempotency_key={key}"

FINISHED = (State.SUCCEEDED, State.FAILED, State.NOT_SENT)
#: Where the client's clock may jump (seconds from true time): fast or slow by seconds,
#: half an hour, an hour, days, a month.
CLIENT_OFFSETS = (
    0.0,
    -CLOCK_SKEW / 2 + 10,
    CLOCK_SKEW / 2 - 10,
    1800.0,
    3600.0,
    -2 * DAY,
    2 * DAY,
    30 * DAY,
)
#: The offsets a right clock is stepped to while no client runs
#: (`client_clock_steps_unseen`): wrong ones, further than `CLOCK_SKEW` from true time.
WRONG_CLIENT_OFFSETS = tuple(offset for offset in CLIENT_OFFSETS if abs(offset) > CLOCK_SKEW)
#: The unseen steps forward that end a client's in-flight hold by its own clock (the
#: profiles' `in_flight_for` is 15 minutes) and keep a key young enough to send again:
#: half an hour (square, wise and gocardless keep keys an hour) and an hour (paypal
#: keeps them 6 hours). Only the server's `Date` then holds the next send back.
#: `client_clock_steps_forward_while_held` draws them.
HOLD_ENDING_STEPS = tuple(offset for offset in WRONG_CLIENT_OFFSETS if 0 < offset <= 3600.0)
#: How long `owner_paused_then_taken_over` pauses a process that holds a lease: until a
#: second before it ends, the boundary a takeover is judged at.
BEFORE_THE_LEASE_ENDS = "until a second before its lease ends"
#: The server's recovery worker sweeps at least this often (seconds of world time).
SWEEP_EVERY = 600.0
#: The external systems forget keys after this: a second send past it moves money again.
EXTERNAL_RETENTION = 3 * 24 * 3600.0
#: The server keeps keys this much longer than its TTL: its clocks may be this far off.
SERVER_CLOCK_TOLERANCE = 3600.0
#: Where the server's clock may jump: within its tolerance, less the client's slowness.
#: A server clock further off reaps keys early where no client can see it (see
#: docs/reliability.md), so that is not generated.
SERVER_OFFSETS = (0.0, -CLOCK_SKEW / 2 + 10, CLOCK_SKEW / 2 - 10, -1790.0, 1790.0)


@dataclass(frozen=True)
class Setup:
    """What the checker needs to know of the server profile both sides speak, derived
    from the profile's own fields: the client (`Client`, `AsyncClient`, `wrap()`, the
    batch) is built with it and the reference server speaks it."""

    profile: Profile
    #: where a payment is created (a collection the profile's server serves)
    payments: str
    #: how long the server keeps a key there and for the batch's payouts (the longest
    #: is the server's reaper TTL)
    retention: float
    #: the reaper's TTL: the longest any of the profile's endpoints keeps a key
    key_ttl: float
    #: spans `time_passes` draws from: around the key retention, and past it
    spans: tuple[float, ...]

    @property
    def name(self) -> str:
        return self.profile.name

    @classmethod
    def of(cls, name: str) -> Setup:
        profile = named(name)
        payments = PATHS[profile.name]
        resolved = [
            profile.resolve("POST", path, frozenset({"POST"})) for path in (payments, PAYOUTS)
        ]
        for path, facts in zip((payments, PAYOUTS), resolved, strict=True):
            # A path the profile keys no request on would be sent as a plain request.
            assert facts.keyed, f"the {profile.name} profile keys no POST {path}"
        retention = min(facts.key_retention for facts in resolved)
        key_ttl = max(
            [
                profile.key_retention,
                *(e.key_retention for e in profile.endpoints if e.key_retention),
            ]
        )
        near = max(retention - SERVER_CLOCK_TOLERANCE, retention / 2)
        spans = (1.0, 5.0, LEASE + 1, 600.0, near, retention + 1, 8 * DAY)
        return cls(profile, payments, retention, key_ttl, spans)

    def path(self, way: str) -> str:
        return PAYOUTS if way == "batch" else self.payments

    def place_key(self, path: str, key: str, body: dict[str, Any]) -> dict[str, str]:
        """Put the caller's own `key` where the profile's server reads it on `path`, as
        an application using `wrap()` does: the headers to send (the body is changed
        in place when the key is a body field)."""
        slot = self.profile.resolve("POST", path, frozenset({"POST"})).key
        if slot.header is not None:
            return {slot.header: slot.header_value(key)}
        assert slot.field is not None
        body[slot.field] = key
        return {}

    def lookup(self, path: str, *, by_key: bool) -> str | None:
        """The look-up `reconcile()` is given: for a payment, the profile's own (None:
        let the client use it, with its statuses), else the reference server's search
        of `path` (the batch's payouts: `reference`'s own look-up finds payments only,
        see test_histories.py)."""
        if by_key:
            return BY_KEY.replace("{path}", path)
        if self.profile.lookup is not None and path == self.payments:
            return None
        return BY_REFERENCE.replace("{path}", path)

    def key_in(self, request: httpx.Request) -> str | None:
        """The key `request` carries where the profile's server reads it."""
        slot = self.profile.resolve(request.method, request.url.path, frozenset({"POST"})).key
        if slot.header is not None:
            value = request.headers.get(slot.header)
            return None if value is None else value.strip().strip('"')
        try:
            document = json.loads(request.content or b"null")
        except ValueError:
            return None
        value = document.get(slot.field) if isinstance(document, dict) else None
        return value if isinstance(value, str) else None

    @property
    def answers_from_the_key(self) -> bool:
        """The server answers a key it holds from what it holds (its stored answer,
        errors included, or "still running"), never with a fresh refusal: the client
        takes a refusal there as the stored answer. A scripted refusal (`REFUSALS`)
        stands for the server refusing a request it did not admit, so it is given only
        to a key the server does not hold."""
        return self.profile.replays_errors or self.profile.replay is not None

    @property
    def keeps_refusals(self) -> bool:
        """The server keeps a refusal (a declined payment's 402) under its key. Where it
        keeps only some answers (Checkout.com's 2xx, named by the 5xx it does not keep;
        django-idempotency-key, which replays only a success), the same key sent again
        after a decline runs again: another declined payment, none made."""
        return not self.profile.unstored and self.profile.replay is None

    def applied(self, resources: list[LedgerEntry]) -> list[LedgerEntry]:
        """The resources that count as the operation applied: every one, or where the
        server does not keep refusals, those not declined."""
        if self.keeps_refusals:
            return resources
        return [r for r in resources if r.status != "declined"]

    @property
    def compares_answers(self) -> bool:
        """Whether a finished key's answer is the stored one given again, so a stored
        answer can be held to the server's (GoCardless names the resource instead)."""
        return self.profile.existing is None


#: Where each profile's server takes a payment: a provider-like collection path
#: (tests/profiles/server_speakers.py, written from the providers' documentation).
PATHS = SPEAKER_PATHS
#: Every built-in profile, the reference server's first.
PROFILES = ("reference", *(name for name in BUILTIN if name != "reference"))


@dataclass
class Operation:
    """One payment the application means to make exactly once."""

    reference: str
    way: str  # client, async, wrap, batch
    by: str  # operation_id or identity
    amount: int
    path: str = "/v1/payments"
    first_key: str | None = None
    #: every key it was recorded with: its first, a batch row's corrections'
    keys: set[str] = dataclasses.field(default_factory=set)
    retired: bool = False  # purged by the operator: never issued again
    #: its record was lost with the store: it may have been applied with none
    forgotten: bool = False

    def __repr__(self) -> str:
        return f"<{self.reference} via {self.way} by {self.by}>"

    @property
    def operation_id(self) -> str | None:
        return f"op-{self.reference}" if self.by == "operation_id" else None

    @property
    def identity(self) -> tuple[str, str]:
        return (self.reference, "charge")

    @property
    def body(self) -> dict[str, Any]:
        return {"amount": self.amount, "currency": "EUR", "reference": self.reference}


kills = st.one_of(st.none(), st.none(), st.integers(min_value=0, max_value=9))
disks = st.sampled_from(
    [frozenset(), frozenset(), frozenset(), INTENT_WRITES, OUTCOME_WRITES, frozenset({"finish"})]
)


class PaymentsMachine(RuleBasedStateMachine):
    """See the module's docstring. This one speaks the `reference` profile;
    `for_profile(name)` makes the machine of another."""

    operations = Bundle("operations")
    setup: Setup = Setup.of("reference")
    #: the clients are built with `time_probe=True`: each asks the server its time
    #: before its first operation, which is what lets a step of the client's clock
    #: while no client runs be seen (the `..._unseen` rules). False: the clients as
    #: built by default, sending only the application's requests; such steps are then
    #: outside the assumptions, and not drawn (docs/reliability.md).
    time_probe: bool = True

    @classmethod
    def for_profile(cls, name: str, *, time_probe: bool = True) -> type[PaymentsMachine]:
        """The machine whose server speaks profile `name`, and whose client (every
        way: `Client`, `AsyncClient`, `wrap()`, the batch) is built with it (and with
        `time_probe`)."""
        setup = Setup.of(name)
        if setup == cls.setup and time_probe == cls.time_probe:
            return cls

        @rule(seconds=st.sampled_from(setup.spans))
        def time_passes(self: PaymentsMachine, seconds: float) -> None:
            PaymentsMachine.time_passes(self, seconds)

        members: dict[str, Any] = {
            "setup": setup,
            "time_probe": time_probe,
            "time_passes": time_passes,
            "__module__": cls.__module__,
        }
        replay = setup.profile.replay.statuses if setup.profile.replay is not None else ()
        conflicts = sorted(int(status) for status in REFUSALS if int(status) in replay)
        if conflicts:

            @rule(status=st.sampled_from(conflicts))
            def application_conflict(self: PaymentsMachine, status: int) -> None:
                """The application's own conflict, answered with the status its server
                also replays a stored success with (django-idempotency-key's 409), to
                the next request it does not admit: as often as any rule, not one of
                FAULTS' many (only this profile's machine has the rule)."""
                self.between.refusals.append(status)

            members["application_conflict"] = application_conflict
        title = "".join(part.title() for part in re.split(r"[-_.]", name))
        title += "" if time_probe else "ByDefault"
        return type(f"PaymentsMachine{title}", (cls,), members)

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory(prefix="idemclient-checker-")
        self.path = os.path.join(self.dir.name, "client.db")
        self.world = World()
        self.server_clock = Clock(self.world)
        self.client_clock = Clock(self.world)
        self.server = ReferenceServer(
            profile=self.setup.profile,
            clock=self.server_clock,
            lease=LEASE,
            key_ttl=self.setup.key_ttl,
            clock_tolerance=SERVER_CLOCK_TOLERANCE,
            external_retention=EXTERNAL_RETENTION,
        )
        self.inspector = SQLiteStore(self.path)
        #: each stored operation's state as the last step saw it (the state table's check)
        self.seen_states: dict[str, tuple[State, bool]] = {}
        self.ops: list[Operation] = []
        self.slow_bodies = [0]
        #: the client's clock is wrong from a step no client saw
        #: (`client_clock_steps_unseen`), until `client_clock_jumps` sets it right
        self.stepped_unseen = False
        #: what lies between the clients and the server (faults.py)
        self.between = Between(self.world, self.setup, self.server, TOKEN)
        self.counter = 0
        self.notes: list[str] = []
        #: the tenant the server knows the clients by (their token names it)
        self.client_name = TOKEN
        #: every claim made to a caller (`told.Told`), in order
        self.told: list[claims.Told] = []
        #: what the latest look-up of each operation said of when to look again
        self.look_again: dict[str, Outcome] = {}
        #: the `not_sent` and `failed` claims not judged yet, by key (see told.py)
        self.claims: dict[str, list[claims.Told]] = {}
        #: the server's ledger as the history ended (after `teardown`)
        self.final_ledger: tuple[LedgerEntry, ...] = ()
        #: the key a paused process holds, and its lease's end by the client's clock,
        #: while another process runs (`owner_paused_then_taken_over`)
        self.leased: tuple[str, float] | None = None
        #: what the client promises of time: its deadline, the server's waits, the key
        #: retention (timing.py)
        self.timing = Timing(
            self.world,
            self.setup,
            self.server,
            self.client_name,
            client_clock=self.client_clock,
            server_clock=self.server_clock,
        )

    # -- processes -----------------------------------------------------------------------

    def _policy(self) -> RetryPolicy:
        # The key retention the client counts on is its profile's (the reference
        # profile's 24 hours), the one its server keeps keys for.
        return RetryPolicy(max_attempts=4, deadline=60.0)

    def _process(
        self,
        kill_at: int | None,
        disk_full: frozenset[str],
        act: Callable[..., Any],
        fate: Fate | None = None,
        **kw: Any,
    ) -> Any:
        """Run one application process: a fresh client on the store file; it may die."""
        fate = fate or Fate(kill_at=kill_at, disk_full=disk_full)
        store = MortalStore(self.path, fate)
        floors = Floors()  # the server's waits this process must honour (timing.py)
        wire = Wire(
            self.server.transport,
            fate,
            self.slow_bodies,
            before=lambda request: self._at_the_server(request, floors),
            after=lambda request, response: self._answered(request, response, floors),
        )
        calls_before = set(_owners._live)
        try:
            return act(store, wire, **kw)
        except Death as death:
            self.notes.append(str(death))
            # Its calls die with it: on this host a dead process's leases are seen to be
            # dead (its pid is gone), as `_owners` checks for a real SIGKILL.
            _owners._live.difference_update(set(_owners._live) - calls_before)
            return death
        finally:
            store.close()
            if fate.violation is not None:
                raise fate.violation

    @property
    def refusals(self) -> list[int]:
        """The scripted refusals waiting for a request the server may refuse."""
        return self.between.refusals

    def _at_the_server(self, request: httpx.Request, floors: Floors) -> httpx.Response | None:
        """Each request as it leaves for the server: not before the server's wait
        (timing.py); what lies between answers it instead (`Between.before`), or the
        claims kept for its key are judged before it reaches the server (it may apply
        under that key: see told.py), and it is held to the key's retention."""
        self.timing.leaving(request, floors)
        if self.leased is not None and request.method == "POST":
            held, until = self.leased
            now = self.client_clock.time()
            assert self.setup.key_in(request) != held or now >= until, (
                f"a request under {held} left {until - now:.1f} s before the lease of the"
                " paused process that holds it ended: two senders"
            )
        answer = self.between.before(request)
        if answer is None and request.method == "POST":
            key = self.setup.key_in(request)
            if key is not None:
                claims.judge_key(self, key, why="as a request under it reaches the server")
            self.timing.reaching(request)
        return answer

    def _answered(
        self, request: httpx.Request, response: httpx.Response, floors: Floors
    ) -> httpx.Response:
        """The server's answer to `request`, as what lies between gives it back (or
        raises instead): a wait in it binds the process (timing.py)."""
        answer = self.between.after(request, response)
        self.timing.answered(request, answer, floors)
        return answer

    def _tell(self, told: list[claims.Told], wire: Wire) -> None:
        """Note what callers were told and judge it (see told.py)."""
        for each in told:
            self.told.append(each)
            claims.judge_now(self, each, posted=wire.posted)

    def _note_when(self, op: Operation, result: object) -> None:
        """Keep what a caller was told of when to try `op` again (a look-up's "look
        again", a server's not-before, an in-flight hold): the end of a history waits
        for it, as an application told so would."""
        outcome = result.outcome if isinstance(result, OutcomeError) else result
        if isinstance(outcome, Outcome) and outcome.not_before is not None:
            self.look_again[op.reference] = outcome

    def _until_nothing_in_flight(self) -> None:
        """Time passes until the server holds no key in flight."""
        # Past the server's lease, then its sweeps until a clock it stepped back (from
        # one end of SERVER_OFFSETS to the other) has caught up with the leases it
        # stamped.
        stepped = max(SERVER_OFFSETS) - min(SERVER_OFFSETS) + LEASE
        for span in (LEASE + 1, *[SWEEP_EVERY] * math.ceil(stepped / SWEEP_EVERY)):
            if not self._server_holds_a_key_in_flight():
                return
            self.world.advance(span)
            self.server.recover()

    def _server_holds_a_key_in_flight(self) -> bool:
        # Every key row the server holds started (under django-idempotency-key, a row's
        # key is the client's key and the request's hash).
        return bool(self.server._storage.stale_keys(stale_before=math.inf, limit=1))

    def _keys_in_flight(self) -> set[str]:
        """The clients' keys the server holds in flight (a django-idempotency-key row's
        key is the client's key, a slash and the request's hash)."""
        rows = self.server._storage.stale_keys(stale_before=math.inf, limit=100)
        return {key.split("/", 1)[0] for _, key in rows}

    def _client(self, store: MortalStore, wire: Wire) -> Client:
        return Client(
            store=store,  # type: ignore[arg-type]
            clock=self.client_clock,
            policy=self._policy(),
            transport=wire,
            base_url=BASE,
            auth=RefreshingAuth(TOKEN),
            profile=self.setup.profile,
            time_probe=self.time_probe,
        )

    def _async_client(self, store: MortalStore, wire: Wire) -> AsyncClient:
        return AsyncClient(
            store=store,  # type: ignore[arg-type]
            clock=self.client_clock,
            policy=self._policy(),
            transport=wire,
            base_url=BASE,
            auth=RefreshingAuth(TOKEN),
            profile=self.setup.profile,
            time_probe=self.time_probe,
        )

    def _issue(self, store: MortalStore, wire: Wire, *, op: Operation, way: str) -> object:
        # A row of a store that was lost: what the server held under each key it was
        # recorded with before this run (see told.py, "unsent here"). The new store
        # records it under the row's own key, which a correction paid before the loss
        # does not have (found deep, gocardless, seed 2293377786).
        before = None
        if way == "batch" and op.forgotten and op.keys and self._record(op) is None:
            before = {key: claims.server_state(self, key) for key in op.keys}
        began = self.world.true
        result = self._issued(store, wire, op=op, way=way)
        if way != "batch" and wire.fate.pause_at is None:
            # A call ends within its deadline (a paused process's pause is not its own).
            self.timing.check_call(DOORS[way], began, deadline=self._policy().deadline)
        if isinstance(result, Report):
            self._tell(claims.told_by_report({op.reference: op}, result, before=before), wire)
        else:
            self._tell(claims.told_by_result(op, result, DOORS[way]), wire)
            self._note_when(op, result)
        return result

    def _issued(self, store: MortalStore, wire: Wire, *, op: Operation, way: str) -> object:
        kwargs: dict[str, Any] = {"json": op.body, "reference": op.reference}
        if op.by == "operation_id":
            kwargs["operation_id"] = op.operation_id
        else:
            kwargs["identity"] = op.identity
        try:
            if way == "client":
                with self._client(store, wire) as client:
                    return client.post(op.path, **kwargs)
            if way == "async":

                async def go() -> Outcome:
                    async with self._async_client(store, wire) as client:
                        return await client.post(op.path, **kwargs)

                return asyncio.run(go())
            if way == "wrap":
                http = httpx.Client(transport=wire, base_url=BASE, auth=RefreshingAuth(TOKEN))
                wrap(
                    http,
                    store=store,  # type: ignore[arg-type]
                    clock=self.client_clock,
                    policy=self._policy(),
                    profile=self.setup.profile,
                    time_probe=self.time_probe,
                )
                with http:
                    body = op.body
                    key = key_from_identity(*op.identity)
                    headers = self.setup.place_key(op.path, key, body)
                    response = http.post(op.path, json=body, headers=headers)
                    return outcome_of(response)
            return self._batch(store, wire, op)
        except IdemError as error:
            return error

    def _batch(self, store: MortalStore, wire: Wire, op: Operation) -> object:
        csv = os.path.join(self.dir.name, f"{op.reference}.csv")
        with open(csv, "w") as out:
            out.write("ref,amount,currency,value_date\n")
            out.write(f"{op.reference},{op.amount},EUR,2026-12-01\n")
        with self._client(store, wire) as client:
            return submit(read_batch(csv), client, path=op.path, concurrency=1)

    def _resume(self, store: MortalStore, wire: Wire, *, way: str) -> object:
        try:
            if way == "async":

                async def go() -> list[Outcome]:
                    async with self._async_client(store, wire) as client:
                        return await client.resume()

                outcomes = asyncio.run(go())
            else:
                with self._client(store, wire) as client:
                    outcomes = client.resume()
        except IdemError as error:
            return error
        by_key = self._ops_by_key()
        for outcome in outcomes:
            op = by_key.get(outcome.key)
            if op is not None:
                self._tell(claims.told_by_result(op, outcome, "resume"), wire)
        return outcomes

    def _ops_by_key(self) -> dict[str, Operation]:
        """The machine's operations by the key the store holds for each."""
        found = {}
        for op in self.ops:
            record = self._record(op)
            if record is not None:
                found[record.key] = op
        return found

    def _reconcile(self, store: MortalStore, wire: Wire, *, op: Operation) -> object:
        record = self._record(op)
        if record is None or record.state in FINISHED:
            return None
        try:
            with self._client(store, wire) as client:
                lookup = self.setup.lookup(op.path, by_key=record.reference is None)
                result: object = client.reconcile(record.operation_id, lookup=lookup)
        except IdemError as error:
            result = error
        self._tell(claims.told_by_result(op, result, "reconcile"), wire)
        self._note_when(op, result)
        return result

    # -- what the store and the server hold ------------------------------------------------

    def _record(self, op: Operation) -> Any:
        """The store's record of `op`: made for its reference, or under its identity's
        key; a batch row's correction, where one was recorded beside the row it corrects
        (`<operation id>#corrected-<digest>`: a correction sent makes every other content
        of the row refused, so there is one to follow)."""
        found = None
        for record in self.inspector.operations():
            ours = record.reference == op.reference or (
                op.by == "identity" and record.key == key_from_identity(*op.identity)
            )
            if ours and (found is None or "#corrected" in record.operation_id):
                found = record
        return found

    def _resources(self, op: Operation) -> list[LedgerEntry]:
        return [e for e in self.server.ledger() if e.reference == op.reference]

    def explains_failure(self, op: Operation) -> bool:
        """Whether the history explains `op` ending refused: a scripted refusal was
        given to one of its requests, or an external system declined it."""
        if op.reference in self.between.refused:
            return True
        return any(entry.status == "declined" for entry in self._resources(op))

    def final_resources(self, op: Operation) -> list[LedgerEntry]:
        """What the server had applied for `op` when the history ended."""
        return [e for e in self.final_ledger if e.reference == op.reference]

    # -- rules ---------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        target=operations,
        way=st.sampled_from(WAYS),
        by=st.sampled_from(("operation_id", "identity")),
        kill_at=kills,
        disk_full=disks,
    )
    def issue_new(
        self, way: str, by: str, kill_at: int | None, disk_full: frozenset[str]
    ) -> Operation:
        self.counter += 1
        if way in ("wrap", "batch"):
            by = "identity"
        op = Operation(
            f"pay{self.counter}", way, by, amount=100 * self.counter, path=self.setup.path(way)
        )
        self.ops.append(op)
        self._process(kill_at, disk_full, self._issue, op=op, way=way)
        return op

    @rule(op=operations, kill_at=kills, disk_full=disks, other=st.booleans())
    def issue_again(
        self, op: Operation, kill_at: int | None, disk_full: frozenset[str], other: bool
    ) -> None:
        if op.retired:
            return
        way = op.way
        if other and op.way in ("client", "async"):
            way = "async" if op.way == "client" else "client"
        self._process(kill_at, disk_full, self._issue, op=op, way=way)

    @rule(op=operations)
    def issue_with_another_body(self, op: Operation) -> None:
        """The application issues an operation again with another body (another amount)
        under its operation id or identity, so under its key: it must be refused before
        anything is sent (a refusal told, nothing of it posted: told.py). Drawn where
        the store has a record to refuse it by; without one (never recorded, or the
        store lost) the other body is simply the operation's first."""
        if op.retired or (record := self._record(op)) is None:
            return
        applied = self.setup.applied(self._resources(op))
        changed = dataclasses.replace(op, amount=op.amount + 1)
        result = self._process(None, frozenset(), self._issue, op=changed, way=op.way)
        if isinstance(result, Report):
            (row,) = result.rows
            refused = row.reason.startswith("refused, not sent")
        else:
            refused = isinstance(result, OperationMismatch | BatchInvalid)
        if refused:
            return
        # Sent: a batch row nothing of which can have been applied takes its corrected
        # content (docs/batch.md: never sent, not sent, or refused); never otherwise.
        assert op.way == "batch", f"{op} issued again with another body was sent: {result!r}"
        assert (record.maybe_applied, applied) == (False, []), (
            f"{op} issued again with another body was sent, though it may have been"
            f" applied ({record.state.value}; the ledger has {applied}): {result!r}"
        )
        op.amount = changed.amount
        op.first_key = None  # a correction refused before may go under a key of its own
        if (corrected := self._record(op)) is not None:
            op.keys.add(corrected.key)

    @rule()
    def store_lost(self) -> None:
        """The client's store file is lost (a disk replaced, a volume gone) while the
        server still holds the keys it was sent. A batch is a file the operator runs
        again: its rows must be found on the server by their reference before anything
        is sent (the batch's keys are derived from the references, but the server may
        have forgotten them). Payments by operation id or a caller's identity are the
        application's own records' business: a new store gives an operation id a new
        key, so they are not issued again (an operator reconciles them, from the
        server): retired (see the assumptions)."""
        # A row the new store does not know has no send time to hold it by, nor a
        # send to make a refusal after it doubtful: run again while the server still
        # runs it, it would be sent beside it (where the server does not guard a key in
        # flight), or a refusal in front of the server taken as final. Lost only once
        # the server holds no key in flight (see the assumptions).
        self._until_nothing_in_flight()
        self.inspector.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path + suffix)
        self.inspector = SQLiteStore(self.path)
        self.seen_states = {}  # a new store: its operations start again
        self.look_again.clear()
        for op in self.ops:
            op.forgotten = True
            if op.way != "batch":
                op.retired = True

    @rule(
        op=operations,
        pause_at=st.integers(min_value=0, max_value=8),
        seconds=st.sampled_from([5.0, LEASE + 1, 200.0, BEFORE_THE_LEASE_ENDS]),
        taker=st.sampled_from(("issue again", "resume", "reconcile")),
    )
    def owner_paused_then_taken_over(
        self, op: Operation, pause_at: int, seconds: float | str, taker: str
    ) -> None:
        """A process stops (SIGSTOP, a GC pause) at its `pause_at`-th event; time passes
        (`seconds`, or until a second before the lease it holds ends), its lease may
        lapse, and another process takes the operation on; then the first one goes on.
        One thread at a time: the first is parked until the second is done. While the
        paused owner's lease runs, no other process sends under its key
        (`_at_the_server`): two senders at once, where a server runs both."""
        if op.retired:
            return
        fate = Fate(pause_at=pause_at)
        broken: list[AssertionError] = []

        def first_process() -> None:
            try:
                self._process(None, frozenset(), self._issue, fate=fate, op=op, way=op.way)
            except AssertionError as violation:  # raised here, once the thread is done
                broken.append(violation)

        first = threading.Thread(target=first_process, daemon=True)
        first.start()
        while not fate.paused.wait(timeout=0.01):
            if not first.is_alive():
                break
        record = self._record(op)
        leased = (
            first.is_alive()
            and record is not None
            and record.lease_owner in _owners._live
            and record.lease_expires is not None
        )
        if seconds == BEFORE_THE_LEASE_ENDS:
            # The boundary a takeover is judged at: a second before the lease ends.
            end = record.lease_expires if leased else None
            seconds = 5.0 if end is None else max(0.0, end - 1.0 - self.client_clock.time())
        assert isinstance(seconds, float)
        try:
            self.world.advance(seconds)
            if leased and record.lease_expires > self.client_clock.time():
                self.leased = (record.key, record.lease_expires)
            if taker == "issue again":
                self._process(None, frozenset(), self._issue, op=op, way=op.way)
            elif taker == "resume":
                self._process(None, frozenset(), self._resume, way="client")
            else:
                self._process(None, frozenset(), self._reconcile, op=op)
        finally:
            self.leased = None
            fate.go_on.set()
            first.join(timeout=60)
        assert not first.is_alive(), "the paused process never finished"
        if broken:
            raise broken[0]

    @rule(kill_at=kills, disk_full=disks, way=st.sampled_from(("client", "async")))
    def resume(self, kill_at: int | None, disk_full: frozenset[str], way: str) -> None:
        self._process(kill_at, disk_full, self._resume, way=way)

    @rule(op=operations, kill_at=kills)
    def reconcile(self, op: Operation, kill_at: int | None) -> None:
        """The application reconciles at once, whatever the server runs: a look-up's
        "none" counts only once the server has had the profile's `in_flight_for` since
        the last send that may have been applied (`_reconcile.still_in_flight`)."""
        self._process(kill_at, frozenset(), self._reconcile, op=op)

    @rule(fault=st.sampled_from(FAULTS))
    def server_fault(self, fault: str) -> None:
        if fault in REFUSALS:
            # Under django-idempotency-key a 409 is also how the server replays a stored
            # success: to a key the caller gave, with no attempt of ours before, the
            # client cannot tell the two apart and leaves it to a look-up.
            self.between.refusals.append(int(fault))
        else:
            inject(self.server, fault, self.slow_bodies)

    @rule(fault=st.sampled_from(PENDING))
    def payment_left_pending(self, fault: str) -> None:
        """The server's next payment is left pending: admitted, its outcome at an
        external system unknown, answered 202 (faults.PENDING). Its own rule, so that a
        202 is drawn about as often as any rule: it is never a final answer."""
        inject(self.server, fault, self.slow_bodies)

    @rule(how=st.sampled_from(LOST), then=st.sampled_from(THEN))
    def answer_lost(self, how: str, then: str) -> None:
        """The next request the server acts on (applies, replays, refuses) has its
        answer lost on the way back (`how`), and then, maybe, nothing of the attempts
        after it reaches the server (`then`): see faults.py."""
        self.between.lost.append((how, then))

    @rule(which=st.integers(min_value=0, max_value=3))
    def edge_refuses_a_held_key(self, which: int) -> None:
        """The next request under a key the server holds is refused before it reaches
        the server: by its edge (403, 404), or where the server does not answer a held
        key from it, with any refusal (faults.py)."""
        statuses = held_refusal_statuses(self.setup)
        self.between.held_refusals.append(statuses[which % len(statuses)])

    @rule(after=st.sampled_from(list(Phase)))
    def server_crashes_after(self, after: Phase) -> None:
        self.server.crash(after)

    @rule()
    def server_recovers(self) -> None:
        self.server.recover()

    @rule(seconds=st.sampled_from(setup.spans))
    def time_passes(self, seconds: float) -> None:
        # The server's recovery worker runs in the background: it never sleeps through
        # a long stretch (a stranded instruction must be resumed while the external
        # systems still remember it), also once a clock stepped back has caught up.
        passed = 0.0
        unresolved = 0
        for sweep in (LEASE + 1, SWEEP_EVERY, SERVER_CLOCK_TOLERANCE + LEASE + 1):
            if seconds > sweep:
                self.world.advance(sweep - passed)
                passed = sweep
                unresolved = self.server.recover().unresolved
        # While a sweep leaves an instruction unresolved (an external system timing out
        # again and again), it goes on sweeping every SWEEP_EVERY: three sweeps and then
        # days of sleep broke the assumption that it runs at least that often (found
        # deep, gocardless: the instruction outlived the external system's retention,
        # was left for an operator, and the payment stayed indeterminate for good).
        while unresolved and seconds > passed + SWEEP_EVERY:
            self.world.advance(SWEEP_EVERY)
            passed += SWEEP_EVERY
            unresolved = self.server.recover().unresolved
        self.world.advance(seconds - passed)

    @rule(offset=st.sampled_from(CLIENT_OFFSETS))
    def client_clock_jumps(self, offset: float) -> None:
        if offset - self.client_clock.offset > CLOCK_SKEW:
            # A step forward no client sees, from a wrong clock, looks like time passing
            # by both clocks: it lapses the client's in-flight hold early and makes a
            # look-up's "none" count early, where the send's time on the server's clock
            # is not known (a dead owner's lease: see the assumptions). Taken only while
            # the server holds no key in flight, under every profile now that the
            # application reconciles at once. From a right clock,
            # `client_clock_steps_unseen` takes it with keys in flight.
            self._until_nothing_in_flight()
        if self.client_clock.offset - offset > CLOCK_SKEW:
            # A step back a client sees (see the assumptions): one runs across it. One
            # started after it would not always see it: the store's latest times may be
            # older than the clock stepped back to (nothing written for days).
            self._process(None, frozenset(), self._runs_across, offset=offset)
        self.client_clock.offset = offset
        if abs(offset) <= CLOCK_SKEW:
            self.stepped_unseen = False

    @precondition(
        lambda self: (
            self.time_probe
            and abs(self.client_clock.offset) <= CLOCK_SKEW
            and self._dates_are_right()
        )
    )
    @rule(offset=st.sampled_from(WRONG_CLIENT_OFFSETS))
    def client_clock_steps_unseen(self, offset: float) -> None:
        """The client's clock, right, is stepped wrong (back or forward) while no client
        runs, with keys possibly in flight: what it stamped while right is then judged
        by the server's `Date` too (see the assumptions). Drawn only from a right clock:
        a record stamped by a wrong clock, set right unseen, is outside; the step back
        to right is `client_clock_jumps`'s."""
        self.client_clock.offset = offset
        self.stepped_unseen = True

    @precondition(
        lambda self: (
            self.time_probe
            and abs(self.client_clock.offset) <= CLOCK_SKEW
            and self._dates_are_right()
            and any(
                (r.not_before or 0.0) > self.client_clock.time()
                for r in self._maybe_applied_in_flight()
            )
        )
    )
    @rule(offset=st.sampled_from(HOLD_ENDING_STEPS))
    def client_clock_steps_forward_while_held(self, offset: float) -> None:
        """`client_clock_steps_unseen` forward, by an hour at most, taken only while
        the client holds (its `not_before`) an operation that may have been applied and
        whose key a server that does not guard a key in flight still runs: its own
        rule, so that it is drawn about as often as any other in the state where only
        the server's `Date` keeps the next send back (among every rule's draws, a step
        of that size in that state was too rare for a deep run to reach)."""
        self.client_clock_steps_unseen(offset)

    @precondition(lambda self: self.stepped_unseen and bool(self._maybe_applied_in_flight()))
    @rule(way=st.sampled_from(("client", "async")))
    def resume_after_the_step(self, way: str) -> None:
        """The application starts on the host whose clock was stepped unseen and
        resumes at once, while the server still runs the key of an operation that may
        have been applied: `resume` without its fates, its own rule, so that in that
        state a send is drawn about as often as the rules that end it (time passing,
        the server's recovery, a look-up's wait)."""
        self._process(None, frozenset(), self._resume, way=way)

    def _maybe_applied_in_flight(self) -> list[Any]:
        """The store's unsettled operations that may have been applied and whose key
        the server, which does not guard a key in flight, still runs."""
        if self.setup.profile.guards_in_flight:
            return []
        running = self._keys_in_flight()
        if not running:
            return []
        return [
            r
            for r in self.inspector.operations()
            if r.key in running and r.maybe_applied and not r.state.finished
        ]

    def _dates_are_right(self, offset: float | None = None) -> bool:
        """The server's `Date` (at `offset`, else its clock's now) is as right as an
        unseen step's in-flight hold, and a look-up's "none" after it, need (see the
        assumptions): within CLOCK_SKEW / 2. Under every profile: the application
        reconciles at once, and a look-up's "none" is judged as the hold is."""
        return abs(self.server_clock.offset if offset is None else offset) <= CLOCK_SKEW / 2

    def _runs_across(self, store: MortalStore, wire: Wire, *, offset: float) -> None:
        with self._client(store, wire):
            self.client_clock.offset = offset

    @rule(offset=st.sampled_from(SERVER_OFFSETS))
    def server_clock_jumps(self, offset: float) -> None:
        if self.stepped_unseen and not self._dates_are_right(offset):
            return  # outside the assumptions while an unseen step's clock is wrong
        self.server_clock.offset = offset

    @rule()
    def server_reaps(self) -> None:
        self.server.reap()

    @precondition(lambda self: any(not op.retired for op in self.ops))
    @rule(data=st.data())
    def operator_purges(self, data: st.DataObject) -> None:
        finished = [
            op for op in self.ops if not op.retired and (r := self._record(op)) and r.state.finished
        ]
        if not finished:
            return
        op = data.draw(st.sampled_from(finished), label="purged")
        record = self._record(op)
        self.inspector.purge([record.operation_id])
        op.retired = True

    # -- the invariant -------------------------------------------------------------------

    @invariant()
    def never_twice_and_agreeing(self) -> None:
        check_step(self)

    def teardown(self) -> None:
        try:
            settle_everything(self)
        finally:
            self.final_ledger = self.server.ledger()
            self.inspector.close()
            self.server.close()
            self.dir.cleanup()


def check_step(machine: PaymentsMachine) -> None:
    """The invariant of every step (see the module's docstring)."""
    assert TOKEN.encode() not in store_bytes(machine.path), "the bearer token is in the store"
    # Every change of an operation's state since the last step is a path of the state
    # table (idemclient/_states.py): nothing finished goes back, nothing skips a look-up.
    seen: dict[str, tuple[State, bool]] = {}
    for record in machine.inspector.operations():
        before = machine.seen_states.get(record.operation_id)
        now = (record.state, record.maybe_applied)
        assert may_follow(before, now), (
            f"{record.operation_id} went from {before} to {now} (state, maybe applied),"
            " which the state table does not allow"
        )
        seen[record.operation_id] = now
    machine.seen_states = seen
    for op in machine.ops:
        resources = machine._resources(op)
        applied = machine.setup.applied(resources)
        assert len(applied) <= 1, f"{op} applied {len(applied)} times: {resources}"
        record = machine._record(op)
        if record is None:
            if not op.retired and not op.forgotten:
                assert not resources, f"{op} applied with no record in the store"
            continue
        if op.first_key is None:
            op.first_key = record.key
        if op.forgotten and op.keys:
            # A batch row run again on a new store is recorded under the row's own key
            # (from its reference), never one it did not have: its first, not a
            # correction's, which the new store cannot know.
            assert record.key in op.keys, f"{op} recorded under {record.key}, not one of {op.keys}"
        else:
            assert record.key == op.first_key, (
                f"{op} changed its key {op.first_key} -> {record.key}"
            )
        op.keys.add(record.key)
        if record.state is State.SUCCEEDED:
            assert [r.status for r in applied] == ["succeeded"], (
                f"{op} is succeeded in the store but the ledger has {resources}"
            )
        elif record.state is State.NOT_SENT:
            # Settled as never applied by a look-up while the server still held the key
            # in flight (admitted, not yet begun: nothing to find), the server may finish
            # it later; sent again with its key, it is that one payment. So at a step:
            # nothing applied under another key; at the end (after resume): nothing.
            assert all(r.idempotency_key == record.key for r in resources), (
                f"{op} is not_sent in the store but applied under another key: {resources}"
            )
        elif record.state is State.FAILED:
            assert all(r.status == "declined" for r in resources), (
                f"{op} is failed in the store but the ledger has {resources}"
            )
        if record.state.finished and record.response is not None and machine.setup.compares_answers:
            if "look-up" in record.evidence or "look up" in record.evidence:
                continue
            row = machine.server.key_record(TOKEN, record.key)
            if (
                row is not None
                and row.state == "finished"
                and record.response.status_code == row.response_code
            ):
                kept = (row.response_body or "").encode()
                assert record.response.body_sha256 == hashlib.sha256(kept).hexdigest(), (
                    f"{op}: the stored answer differs from the server's"
                )


def settle_everything(machine: PaymentsMachine) -> None:
    """The end of a history: faults stop, the server recovers, the client resumes and
    reconciles; then every operation agrees with the ledger."""
    server = machine.server
    server.clear_faults()
    machine.slow_bodies[0] = 0
    machine.between.clear()
    # A server clock stepped back holds the leases it stamped before the step until it
    # catches up (up to its tolerance): recovery is late then, never wrong.
    machine.world.advance(SERVER_CLOCK_TOLERANCE)
    for _ in range(3):
        machine.world.advance(3 * LEASE + 120.0)
        server.recover()
    # What callers were told "not sent" or "failed" is judged now, the server's recovery
    # done, before the resume below sends anything under those keys (told.py).
    claims.judge_all(machine, why="at the end of the history, the server recovered,")
    machine._process(None, frozenset(), machine._resume, way="client")
    for op in machine.ops:
        machine._process(None, frozenset(), machine._reconcile, op=op)
    # A look-up's "none" counts once the server has had the profile's in_flight_for
    # (and the hosts' clock skew, CLOCK_SKEW) since the last send that may have been
    # applied; a takeover at the resume above
    # counts a dead owner's sends until its lease's end, stamped by its clock (an hour
    # fast, say, then set right: that end is late by the step). Said so by the look-up
    # (its not_before), an operator looks again once that time has passed.
    # The server's clock must say so too (its Date: whole seconds, read as the earliest
    # the time may be, so up to a second later); a server clock slow by X (within its
    # tolerance) says so up to X later, measured from a send stamped by a clock that
    # was fast then and has been set right (found deep, django-idempotency-key: an hour
    # fast, a server half an hour slow, the owner killed in flight).
    if any((r := machine._record(op)) is not None and not r.state.finished for op in machine.ops):
        machine.world.advance(
            machine.setup.profile.in_flight_for
            + CLOCK_SKEW
            + SERVER_CLOCK_TOLERANCE
            + DATE_RESOLUTION
        )
        server.recover()
        for op in machine.ops:
            machine._process(None, frozenset(), machine._reconcile, op=op)
    # A dead owner's lease stamped by a clock days fast (stepped there unseen), the
    # clock since set back: the look-up counts that owner's sends until the lease's
    # end, days ahead, and says so (its not_before). Late, never wrong: the operator
    # looks again then (found deep, adyen, seed 22: killed right after its intent with
    # the clock two days fast, then set back to an hour fast).
    for _ in range(3):
        later = [
            told.not_before
            for op in machine.ops
            if (told := machine.look_again.get(op.reference)) is not None
            and told.not_before is not None
            and (r := machine._record(op)) is not None
            and not r.state.finished
        ]
        if not later:
            break
        machine.world.advance(max(later) - machine.client_clock.time() + DATE_RESOLUTION + 1)
        server.recover()
        for op in machine.ops:
            machine._process(None, frozenset(), machine._reconcile, op=op)
    check_step(machine)
    for op in machine.ops:
        record = machine._record(op)
        if record is not None:
            assert record.state in FINISHED, (
                f"{op} still {record.state.value} after resume and reconcile: {record.evidence}"
            )
            _agrees_with_the_ledger(machine, op, record)
    # Liveness: nothing is silently never paid. The application issues again, as it
    # would, every operation it has no answer for (never recorded, or settled not sent);
    # then every operation it issued is paid once, or refused for a reason the history
    # explains (a scripted refusal, a decline), or was purged by the operator.
    for _ in range(3):
        again = [
            op
            for op in machine.ops
            if not op.retired
            and ((record := machine._record(op)) is None or record.state is State.NOT_SENT)
        ]
        if not again:
            break
        # Told to wait (a server's not-before, judged by a clock set back since), the
        # application waits: late, never wrong.
        later = [
            told.not_before
            for op in again
            if (told := machine.look_again.pop(op.reference, None)) is not None
            and told.not_before is not None
        ]
        if later and max(later) > machine.client_clock.time():
            machine.world.advance(max(later) - machine.client_clock.time() + 1)
        for op in again:
            machine._process(None, frozenset(), machine._issue, op=op, way=op.way)
    check_step(machine)
    for op in machine.ops:
        if op.retired:
            continue
        record = machine._record(op)
        assert record is not None, f"{op} was issued and is still not recorded: never paid"
        assert record.state in (State.SUCCEEDED, State.FAILED), (
            f"{op} issued again at the end and still {record.state.value}: never paid"
            f" ({record.evidence})"
        )
        _agrees_with_the_ledger(machine, op, record)
        if record.state is State.FAILED:
            assert machine.explains_failure(op), (
                f"{op} ends failed, and nothing in the history refused or declined it:"
                f" never paid ({record.evidence})"
            )


def _agrees_with_the_ledger(machine: PaymentsMachine, op: Operation, record: Any) -> None:
    """A settled operation agrees with the ledger: not sent, nothing applied; succeeded,
    applied once, at both external systems, through every handler."""
    resources = machine._resources(op)
    if record.state is State.NOT_SENT:
        assert not resources, f"{op} ends not_sent but was applied: {resources}"
    if record.state is State.SUCCEEDED:
        (entry,) = machine.setup.applied(resources)
        assert (entry.ext1_applied, entry.ext2_applied) == (1, 1), entry
        assert entry.journal == ("H1", "H2", "H3"), entry
