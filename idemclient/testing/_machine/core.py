"""The protocol core: one request in, one answer out. All of the server half lives here.

`Core.handle` takes a `ServerRequest` and returns a `ServerResponse` or
`DropConnection`; it knows nothing about sockets, httpx or ASGI. A resource-creating
POST goes through the seed's machine:

    admit (INSERT .. ON CONFLICT DO NOTHING RETURNING)
      -> Handler1 -> EXT1_SENT -> external system 1 -> EXT1_DONE
      -> Handler2 -> EXT2_SENT -> external system 2 -> EXT2_DONE -> Handler3 (finished)

Each arrow is one local transaction that also advances `recovery_point` and refreshes
the lease, so a resumer always knows what committed. Intent is committed before each
external call and the outcome after it. A key that already exists is judged by
`judge_existing`: replay, 422, 409, or takeover of a stale lease followed by resuming
from `recovery_point` (probing the external system before calling it again).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from .._protocol.dialect import Dialect, InFlight, Mismatch, Search
from .._protocol.messages import DropConnection, ServerRequest, ServerResponse, json_bytes
from .._protocol.rules import (
    JSON_CONTENT_TYPE,
    PROBLEM_CONTENT_TYPE,
    Payment,
    Phase,
    Problem,
    Step,
    Verdict,
    downstream_key,
    judge_existing,
    next_step,
    parse_bearer,
    parse_idempotency_key,
    parse_payment,
    render_retry_after,
    request_hash,
)
from .._storage.backend import StorageBackend
from .._storage.rows import ExternalRecord, KeyRow, ResourceRow, RowHeld, StorageDown
from .clock import ServerClock
from .external import ExternalDown, ExternalSystem, ExternalTimeout
from .faults import Action, Answer, Crash, Delay, FaultPlan
from .records import RecoveryReport
from .webhooks import events_for

__all__ = ["Core", "storage_down"]

logger = logging.getLogger("idemclient.testing")

# The body's other fields as stored (`json.dumps(..., sort_keys=True)`), with one
# encoder built once rather than one per payment.
_FIELDS = json.JSONEncoder(sort_keys=True)
#: resource kind -> id prefix
ID_PREFIXES = {"payment": "pay", "payout": "po"}
# In flight: come back soon. The owner usually finishes well inside a second; a lease
# can be 30 s, and telling clients to wait that long would only slow them down.
IN_FLIGHT_RETRY_AFTER = "1"
# Bounded inline work on an external system within one attempt (diagram 3): a retry
# with the same derived key is safe, but an attempt must end while the client waits.
INLINE_CALLS = 2
# The database unusable: come back in a few seconds, the time a database restarts or
# fails over in, rather than at once, adding to a crowd of retries.
STORAGE_RETRY_AFTER = "5"


class _Crashed(Exception):
    """An injected crash: stop now, leave everything as committed so far."""

    def __init__(self, point: Phase) -> None:
        super().__init__(point.value)
        self.point = point


@dataclass(frozen=True, slots=True)
class _Unresolved:
    """An external step ended without an answer: the row waits at EXTn_SENT."""


_UNRESOLVED = _Unresolved()


@dataclass(slots=True)
class _Work:
    """One attempt's hold on one key row, and what it knows so far."""

    client: str
    #: the key row's key: the client's key, or one derived from it (see `_record_key`)
    key: str
    owner: str
    kind: str
    endpoint: str
    payment: Payment
    point: str | None
    resource: ResourceRow | None
    crash: Phase | None
    #: resumed at an EXTn_SENT left by someone else: probe before calling
    probe_first: bool
    #: when the instruction being resumed was last marked sent (the key row's last
    #: attempt); an external system past its retention since then cannot say "never"
    sent_at: float | None = None


def _json_response(status: int, value: Any, *extra: tuple[str, str]) -> ServerResponse:
    return ServerResponse(status, (("content-type", JSON_CONTENT_TYPE), *extra), json_bytes(value))


@functools.lru_cache(maxsize=1024)
def _external_answer(answer: str) -> tuple[str, str]:
    """(outcome, reference) in an external system's answer as stored on the resource.

    A payment's later phases and its representation read the same answer several
    times: it is parsed once (the answers are immutable strings, so sharing is safe)."""
    value = json.loads(answer)
    return value["outcome"], value["reference"]


def _external_reference(answer: str | None) -> str | None:
    return None if answer is None else _external_answer(answer)[1]


def resource_json(row: ResourceRow) -> dict[str, Any]:
    """The public representation of a payment or payout."""
    return {
        **json.loads(row.fields),
        "id": row.id,
        "object": row.kind,
        "amount": row.amount,
        "currency": row.currency,
        "reference": row.reference,
        "status": row.status,
        "created": int(row.created_at),
        "idempotency_key": row.idempotency_key,
        "external": {"ext1": _external_reference(row.ext1), "ext2": _external_reference(row.ext2)},
    }


def _location(kind: str, resource_id: str) -> tuple[str, str]:
    return ("location", f"/v1/{kind}s/{resource_id}")


def _not_found(what: str) -> Problem:
    # 404 for another client's id, reference or key as much as for one that never
    # existed: the answer must not tell them apart, or keys could be enumerated.
    return Problem(404, "not-found", "Not found", f"no {what} of yours matches")


class Core:
    """The server half of the protocol over one `StorageBackend`. Thread-safe."""

    def __init__(
        self,
        *,
        storage: StorageBackend,
        clock: ServerClock,
        faults: FaultPlan,
        externals: tuple[ExternalSystem, ExternalSystem],
        lease: float,
        key_ttl: float,
        dialect: Dialect,
        webhook_lifecycle: Callable[[str], bool] = lambda client: False,
        clock_tolerance: float = 0.0,
    ) -> None:
        if not lease > 0:
            raise ValueError(f"the lease must be positive, not {lease!r}")
        if not key_ttl > 0:
            raise ValueError(f"the key TTL must be positive, not {key_ttl!r}")
        if not 0 <= clock_tolerance < float("inf"):
            raise ValueError(f"the clock tolerance must be >= 0 seconds, not {clock_tolerance!r}")
        self.storage = storage
        self.clock = clock
        self.faults = faults
        self.externals = externals
        self.lease = lease
        self.key_ttl = key_ttl
        self.dialect = dialect
        #: whether `client`'s webhook endpoint wants each resource's whole lifecycle
        self.webhook_lifecycle = webhook_lifecycle
        self.clock_tolerance = clock_tolerance

    # -- entry point ---------------------------------------------------------------------

    def handle(self, request: ServerRequest) -> ServerResponse | DropConnection:
        """Answer one request."""
        creating = self.dialect.collection(request.path) is not None and request.method == "POST"
        hint = self.dialect.key_hint(request)
        # A HEAD does nothing here (a client asks it for the server's time, its Date):
        # a fault scripted for the next request waits for one that does something.
        action = (
            None
            if request.method == "HEAD"
            else self.faults.take(path=request.path, key=hint, phased=creating)
        )
        if isinstance(action, Answer):
            return self._render_answer(action)
        try:
            result = self._dispatch(request, action)
        except Problem as problem:
            result = problem.response()
        except RowHeld as held:
            # Another server holds the key's row (frozen mid-transaction): nothing was
            # done here; the client retries once its lock has had time to go.
            result = Problem(
                409,
                "row-held",
                "Request in progress elsewhere",
                f"another transaction holds this key's row: {held}",
                headers=(("retry-after", IN_FLIGHT_RETRY_AFTER),),
            ).response()
        except StorageDown as down:
            result = storage_down(request, down)
        if isinstance(result, ServerResponse):
            if isinstance(action, Delay):
                result = dataclasses.replace(result, delay=action.seconds)
            elif isinstance(action, Crash) and action.after is Phase.FINISHED:
                return DropConnection("injected drop after the request was handled")
        return result

    def _dispatch(
        self, request: ServerRequest, action: Action | None
    ) -> ServerResponse | DropConnection:
        client = parse_bearer(request.header_values("authorization"))
        if (asked := self.dialect.read_lookup(request)) is not None:
            if isinstance(asked, Search):
                return self._search_lookup(client, asked)
            return self._lookup(client, *asked)
        if (kind := self.dialect.collection(request.path)) is not None:
            if request.method == "POST":
                crash = action.after if isinstance(action, Crash) else None
                return self._create(request, client, kind, crash)
            if request.method == "GET":
                return self._search(request, client, kind)
            raise _method_not_allowed("GET, POST")
        if (item := self.dialect.item(request.path)) is not None:
            if request.method != "GET":
                raise _method_not_allowed("GET")
            kind, resource_id = item
            rows = self.storage.find_resources(client=client, kind=kind, resource_id=resource_id)
            if not rows:
                raise _not_found(kind)
            return _json_response(200, resource_json(rows[0]))
        raise Problem(404, "no-such-route", "Not found", f"nothing is served at {request.path}")

    def _render_answer(self, answer: Answer) -> ServerResponse:
        headers: list[tuple[str, str]] = []
        if answer.retry_after is not None:
            headers.append(("retry-after", render_retry_after(answer.retry_after)))
        if answer.retry_after_date_in is not None:
            when = datetime.fromtimestamp(self.clock.time() + answer.retry_after_date_in, UTC)
            headers.append(("retry-after", render_retry_after(when)))
        if answer.retry_after_ms is not None:
            headers.append(("retry-after-ms", str(answer.retry_after_ms)))
        headers.extend(answer.headers)
        if answer.body is not None:
            if not any(name.lower() == "content-type" for name, _ in headers):
                headers.insert(0, ("content-type", JSON_CONTENT_TYPE))
            return ServerResponse(answer.status, tuple(headers), answer.body)
        try:
            title = HTTPStatus(answer.status).phrase
        except ValueError:
            title = f"Status {answer.status}"
        problem = Problem(answer.status, "scripted", title, "a scripted sandbox answer")
        return ServerResponse(
            answer.status,
            (("content-type", PROBLEM_CONTENT_TYPE), *headers),
            json_bytes(problem.body()),
        )

    # -- look-ups, scoped to the caller ------------------------------------------------

    def _search(self, request: ServerRequest, client: str, kind: str) -> ServerResponse:
        params = request.query_params()
        reference = params.get("reference")
        key = params.get("idempotency_key")
        if reference is None and key is None:
            raise Problem(
                400,
                "filter-required",
                "A filter is required",
                "search by ?reference=R or ?idempotency_key=K",
            )
        if key is not None:
            key = parse_idempotency_key([key])
        rows = self.storage.find_resources(
            client=client, kind=kind, reference=reference, idempotency_key=key
        )
        # No match is an empty list, not a 404: a client telling "no such payment" from
        # "no such endpoint" must not have to guess (another client's payments are no
        # match either, so the answer still reveals nothing about them).
        return _json_response(200, {"object": "list", "data": [resource_json(r) for r in rows]})

    def _lookup(self, client: str, reference: str | None, key: str | None) -> ServerResponse:
        """The profile's own look-up (`Profile.lookup`), over payments and payouts, with
        each status in the look-up's words."""
        if reference is None and key is None:
            raise Problem(400, "filter-required", "A filter is required", "nothing to look up")
        found = []
        for kind in ("payment", "payout"):
            for row in self.storage.find_resources(
                client=client, kind=kind, reference=reference, idempotency_key=key
            ):
                value = resource_json(row)
                value["status"] = self.dialect.lookup_status(row.status)
                found.append(value)
        return _json_response(200, {"object": "list", "data": found, "has_more": False})

    def _search_lookup(self, client: str, search: Search) -> ServerResponse:
        """The profile's look-up by a search query (Stripe's): every clause read as
        the provider reads it, over the caller's payments and payouts."""
        found = []
        for kind in ("payment", "payout"):
            for row in self.storage.find_resources(client=client, kind=kind):
                value = resource_json(row)
                value["status"] = self.dialect.lookup_status(row.status)
                fields = {"reference": row.reference, "status": value["status"]}
                held = [fields.get(name) == wanted for name, wanted in search.clauses]
                if any(held) if search.any_of else all(held):
                    found.append(value)
        return _json_response(200, {"object": "list", "data": found, "has_more": False})

    # -- creation: admission, then the phase machine -----------------------------------

    def _create(
        self, request: ServerRequest, client: str, kind: str, crash: Phase | None
    ) -> ServerResponse | DropConnection:
        dialect = self.dialect
        challenged = dialect.challenge(request)
        if challenged is not None:
            return challenged  # before anything is read or stored
        read = dialect.read_key(request)
        if read.key is None and dialect.requires_key(request.path):
            raise dialect.missing_key(request.path)
        # Validation before admission: a request that fails it never started executing,
        # so nothing is stored and the client may fix the body and send the same key.
        payment, canonical = parse_payment(read.body)
        digest = request_hash(request.method, request.path, canonical)
        # No key where the provider does not require one: the request runs, once, under
        # a key nobody can present again (as the provider runs a request without a key).
        record = _record_key(read.key, digest, by_request=dialect.records_by_request())
        owner = secrets.token_hex(8)
        now = self.clock.time()

        def admit(key: str) -> tuple[bool, KeyRow]:
            return self.storage.admit(
                client=client,
                key=key,
                request_hash=digest,
                endpoint=request.path,
                request_body=canonical,
                owner=owner,
                now=now,
            )

        owned, row = admit(record)
        if not owned and row.state == "finished" and dialect.forgets_on_arrival:
            # Past its retention the provider has forgotten the key: a new request. (As
            # for the reaper, the clocks' tolerance is allowed on top.)
            retention = dialect.retention(request.method, request.path) + self.clock_tolerance
            if row.created_at <= now - retention:
                self.storage.forget(client=client, key=record, created_before=now - retention)
                owned, row = admit(record)
        try:
            if owned:
                work = _Work(
                    client, record, owner, kind, request.path, payment, None, None, crash, False
                )
                _checkpoint(work, Phase.ADMITTED)
                return self._started(work)
            verdict = judge_existing(
                stored_hash=row.request_hash,
                state=row.state,
                locked_at=row.locked_at,
                request_hash=digest,
                now=now,
                lease=self.lease,
            )
            if verdict is Verdict.MISMATCH:
                mode = dialect.mismatch_mode
                if mode is Mismatch.ANSWER:
                    return dialect.mismatch(_key_reused().response())
                if mode is Mismatch.EXISTING and row.resource_id is not None:
                    return dialect.existing(row.resource_id)
                # The server keys by the key alone: judged as the first request.
                verdict = judge_existing(
                    stored_hash=row.request_hash,
                    state=row.state,
                    locked_at=row.locked_at,
                    request_hash=row.request_hash,
                    now=now,
                    lease=self.lease,
                )
            if verdict is Verdict.REPLAY:
                if dialect.profile.existing is not None and row.resource_id is not None:
                    return dialect.existing(row.resource_id)
                return self._replay(row)
            if verdict is Verdict.TAKE_OVER:
                taken = self.storage.take_over(
                    client=client, key=record, owner=owner, now=now, stale_before=now - self.lease
                )
                if taken is not None:
                    return self._started(self._resume(taken, owner, crash))
            if dialect.in_flight is InFlight.EXISTING and row.resource_id is not None:
                return dialect.existing(row.resource_id)
            if dialect.in_flight is InFlight.ANSWER:
                return self._busy(row.resource_id, request.path)
            # No guard for a request in flight: this one runs as well, beside it.
            again = f"{record}/run-{secrets.token_hex(6)}"
            owned, _ = admit(again)
            if not owned:  # pragma: no cover - a fresh random key is never taken
                return self._busy(row.resource_id, request.path)
            work = _Work(
                client, again, owner, kind, request.path, payment, None, None, crash, False
            )
            _checkpoint(work, Phase.ADMITTED)
            return self._started(work)
        except _Crashed as crashed:
            return DropConnection(f"injected crash after {crashed.point.value}")

    def _started(self, work: _Work) -> ServerResponse:
        """Run `work`, a request whose key row this attempt holds, started.

        The database lost from here on leaves that row behind, maybe past a phase that
        reached an external system, for a retry or the recovery worker to finish: what
        the client is told must say it may have been applied."""
        try:
            return self._run(work)[0]
        except StorageDown as down:
            raise StorageDown(down.detail, maybe_written=True) from down

    def _busy(self, resource_id: str | None, endpoint: str) -> ServerResponse:
        """ "Still running" in the profile's words, for a request to `endpoint`."""
        return self.dialect.in_progress(resource_id, endpoint, _in_flight(resource_id))

    def _replay(self, row: KeyRow) -> ServerResponse:
        assert row.response_code is not None
        assert row.response_body is not None
        code = row.response_code
        content_type = PROBLEM_CONTENT_TYPE if code >= 400 else JSON_CONTENT_TYPE
        headers: list[tuple[str, str]] = [("content-type", content_type)]
        if row.resource_id is not None:
            headers.append(_location(self.dialect.kind_of(row.endpoint), row.resource_id))
        return self.dialect.replay(code, row.response_body, headers)

    def _resume(self, row: KeyRow, owner: str, crash: Phase | None) -> _Work:
        payment, _ = parse_payment(row.request_body)
        resource = None if row.resource_id is None else self.storage.resource(row.resource_id)
        kind = self.dialect.kind_of(row.endpoint)
        return _Work(
            row.client,
            row.key,
            owner,
            kind,
            row.endpoint,
            payment,
            row.recovery_point,
            resource,
            crash,
            probe_first=True,
            sent_at=row.last_attempt_at,
        )

    def _run(self, work: _Work) -> tuple[ServerResponse, bool]:
        """Run the phase machine from `work.point` to the end. (answer, finished).

        Every write is fenced by the lease owner; a write that finds the lease gone
        means another actor took the request over, and this attempt bows out with 409.
        """
        storage = self.storage
        while True:
            declined = work.resource is not None and work.resource.status == "declined"
            step = next_step(work.point, declined=declined)
            now = self.clock.time()
            common: dict[str, Any] = {
                "client": work.client,
                "key": work.key,
                "owner": work.owner,
                "now": now,
            }
            if step is Step.HANDLER3:
                return self._handler3(work, common)
            if step is Step.HANDLER1:
                created = self._new_resource(work, now)
                if not storage.handler1(**common, resource=created):
                    return self._busy(None, work.endpoint), False
                work.resource, work.point = created, Phase.H1_DONE
                _checkpoint(work, Phase.H1_DONE)
                continue
            resource = work.resource
            assert resource is not None, "every step after Handler1 has a resource"
            if step in (Step.SEND_EXT1, Step.SEND_EXT2):
                point = Phase.EXT1_SENT if step is Step.SEND_EXT1 else Phase.EXT2_SENT
                ok = storage.mark_sent(**common, point=point)
                work.probe_first = False
            elif step in (Step.CALL_EXT1, Step.CALL_EXT2):
                system = 1 if step is Step.CALL_EXT1 else 2
                settled = self._settle(work, system)
                if isinstance(settled, _Unresolved):
                    return self._park(work), False
                _checkpoint(work, Phase.EXT1_CALLED if system == 1 else Phase.EXT2_CALLED)
                point = Phase.EXT1_DONE if system == 1 else Phase.EXT2_DONE
                answer = json.dumps({"outcome": settled.outcome, "reference": settled.reference})
                ok = storage.record_external(**common, point=point, system=system, answer=answer)
                work.resource = (
                    dataclasses.replace(resource, ext1=answer)
                    if system == 1
                    else dataclasses.replace(resource, ext2=answer)
                )
            else:
                point = Phase.H2_DONE
                status = "declined" if _outcome(resource.ext1) == "declined" else "authorized"
                ok = storage.handler2(**common, status=status)
                work.resource = dataclasses.replace(resource, status=status)
            if not ok:
                return self._busy(resource.id, work.endpoint), False
            work.point = point
            _checkpoint(work, point)

    def _new_resource(self, work: _Work, now: float) -> ResourceRow:
        prefix = ID_PREFIXES[work.kind]
        return ResourceRow(
            id=f"{prefix}_{secrets.token_hex(12)}",
            kind=work.kind,
            client=work.client,
            idempotency_key=_client_key(work.key),
            reference=work.payment.reference,
            amount=work.payment.amount,
            currency=work.payment.currency,
            status="pending",
            fields=_FIELDS.encode(dict(work.payment.extra)),
            ext1=None,
            ext2=None,
            created_at=now,
        )

    def _handler3(self, work: _Work, common: dict[str, Any]) -> tuple[ServerResponse, bool]:
        resource = work.resource
        assert resource is not None
        declined = "declined" in (
            resource.status,
            _outcome(resource.ext1),
            _outcome(resource.ext2),
        )
        final = dataclasses.replace(resource, status="declined" if declined else "succeeded")
        # The representation is built once: the answer and the event carry the same one.
        represented = resource_json(final)
        if declined:
            problem = Problem(
                402,
                "declined",
                "Payment declined",
                f"an external system declined this {final.kind}",
                extra={"resource": represented},
            )
            code, body, content_type = 402, json_bytes(problem.body()), PROBLEM_CONTENT_TYPE
        else:
            code, body, content_type = 201, json_bytes(represented), JSON_CONTENT_TYPE
        # The webhook events are queued in the same transaction (an outbox): they exist
        # if and only if the resource is final, and sending them is the deliverer's job.
        # With the lifecycle on, `<kind>.created` (the resource as it was made) comes
        # first, then the final status.
        events = events_for(
            final,
            represented,
            common["now"],
            created={**represented, "status": "pending"}
            if self.webhook_lifecycle(final.client)
            else None,
        )
        if not self.storage.finish(
            **common, status=final.status, response_code=code, response_body=body, events=events
        ):
            return self._busy(resource.id, work.endpoint), False
        if not self.dialect.stores(code):
            # This server keeps only some answers (Checkout: 2xx): the key stays unused.
            self.storage.forget(client=work.client, key=work.key, created_before=common["now"])
        # Phase.FINISHED (apply-then-drop) is applied by `handle` to whatever is answered.
        headers = (("content-type", content_type), _location(work.kind, resource.id))
        return ServerResponse(code, headers, body), True

    def _settle(self, work: _Work, system: int) -> ExternalRecord | _Unresolved:
        """Get an answer from an external system within this attempt, or give up honestly.

        Probe first when resuming at EXTn_SENT (an instruction may be out there). After a
        failed call, probe; if the system says it never received it, call again with the
        same derived key; otherwise stop with the outcome unknown.
        """
        external = self.externals[system - 1]
        derived = downstream_key(work.client, work.key, f"ext{system}")
        assert work.resource is not None
        if work.probe_first:
            probed = _probe(external, derived)
            if probed is not None:
                return probed
            if self._forgotten(external, work.sent_at):
                # The instruction may have been applied and forgotten since: "never
                # received" proves nothing, and a call would apply it a second time.
                # The row stays, for an operator to settle with the external system.
                return _UNRESOLVED
        for _ in range(INLINE_CALLS):
            try:
                return external.call(
                    derived, resource_id=work.resource.id, amount=work.resource.amount
                )
            except (ExternalDown, ExternalTimeout):
                pass
            probed = _probe(external, derived)
            if isinstance(probed, ExternalRecord):
                return probed
            if isinstance(probed, _Unresolved):
                return probed
            # "Never received": whatever was sent before did not land, so calling again
            # with the same key is safe.
        return _UNRESOLVED

    def _forgotten(self, external: ExternalSystem, sent_at: float | None) -> bool:
        """Whether `external` may have forgotten an instruction sent at `sent_at`."""
        if external.retention is None:
            return False
        return sent_at is None or self.clock.time() - sent_at >= external.retention

    def _park(self, work: _Work) -> ServerResponse:
        """Leave the row at EXTn_SENT, release the lease, and say so (diagram 3)."""
        resource = work.resource
        assert resource is not None
        if not self.storage.release(
            client=work.client, key=work.key, owner=work.owner, now=self.clock.time()
        ):
            return self._busy(resource.id, work.endpoint)
        location = _location(work.kind, resource.id)
        # Accepted, outcome unknown: never "failed", never "succeeded". The row is the
        # instruction to resume; a retry or the recovery worker finishes it. Even when
        # nothing reached the external system this time (it was down) the answer is not
        # a 503: the request was admitted and its first phase ran (at system 2, system 1
        # applied its part), and the recovery worker goes on with it whether the client
        # sends again or not. A 503 tells a client nothing was done, which would be a lie.
        return _json_response(
            202, resource_json(resource), location, ("retry-after", IN_FLIGHT_RETRY_AFTER)
        )

    # -- background work -----------------------------------------------------------------

    def recover_once(self, *, limit: int = 100) -> RecoveryReport:
        """Sweep started rows whose lease expired or was released, and resume each once."""
        now = self.clock.time()
        stale_before = now - self.lease
        candidates = self.storage.stale_keys(stale_before=stale_before, limit=limit)
        resumed = finished = 0
        for client, key in candidates:
            owner = secrets.token_hex(8)
            try:
                row = self.storage.take_over(
                    client=client, key=key, owner=owner, now=now, stale_before=stale_before
                )
            except RowHeld:
                continue  # held since the sweep saw it: one held key never stops the sweep
            if row is None:
                continue  # a client retry took it first: whoever wins, the outcome is the same
            resumed += 1
            try:
                _, done = self._run(self._resume(row, owner, crash=None))
            except Exception:
                # One broken row must not stop the sweep; the lease expires and a later
                # sweep tries again.
                logger.exception("recovery of (%r, %r) failed", client, key)
                done = False
            finished += done
        return RecoveryReport(
            examined=len(candidates),
            resumed=resumed,
            finished=finished,
            unresolved=resumed - finished,
        )

    def reap_once(self) -> int:
        """Drop finished keys older than the TTL plus the clock tolerance (on PostgreSQL:
        whole days of them, once the whole day is older). Returns how many.

        A key's age is read on this server's clock against the time a server (maybe
        another, sharing the database) stamped it with: the tolerance is how far those
        clocks may disagree, or step, before a key is dropped earlier than the TTL a
        client counts on."""
        now = self.clock.time()
        cutoff = now - self.key_ttl - self.clock_tolerance
        return self.storage.reap(created_before=cutoff, now=now)


def _record_key(key: str | None, digest: bytes, *, by_request: bool) -> str:
    """The key row's key. A client's key never contains "/", so what follows one is
    the server's: the request's hash where records are keyed by the request too
    (django-idempotency-key), a random run id for a request without a key or one run
    beside another in flight."""
    if key is None:
        return f"auto-{secrets.token_hex(12)}/unkeyed"
    return f"{key}/{digest.hex()[:32]}" if by_request else key


def _client_key(record: str) -> str:
    """The client's key in a key row's key (see `_record_key`)."""
    return record.split("/", 1)[0]


def _checkpoint(work: _Work, point: Phase) -> None:
    if work.crash is point:
        raise _Crashed(point)


def _outcome(answer: str | None) -> str | None:
    return None if answer is None else _external_answer(answer)[0]


def _probe(external: ExternalSystem, key: str) -> ExternalRecord | _Unresolved | None:
    """A status query by derived key: the record, None (never received), or unknown."""
    try:
        return external.status(key)
    except (ExternalTimeout, ExternalDown):
        return _UNRESOLVED


def _in_flight(resource_id: str | None) -> ServerResponse:
    extra = {} if resource_id is None else {"resource_id": resource_id}
    return Problem(
        409,
        "request-in-flight",
        "Request in flight",
        "another attempt with this key is in progress; retry after Retry-After",
        extra=extra,
        headers=(("retry-after", IN_FLIGHT_RETRY_AFTER),),
    ).response()


def storage_down(request: ServerRequest, down: StorageDown) -> ServerResponse:
    """The answer when the database cannot be used: never a bare 500.

    Nothing written by this request: `503`, retry later with the same key. Maybe
    written (the database was lost after the key was admitted, or while a commit was
    on its way): `500`, which a client reads as "may have been applied" and retries
    with the same key; the server finishes the request when the database is back. The
    database's own words go to the log, never to the client."""
    logger.warning("%s %s: the database cannot be used: %s", request.method, request.path, down)
    retry = (("retry-after", STORAGE_RETRY_AFTER),)
    if down.maybe_written:
        return Problem(
            500,
            "storage-lost",
            "Database lost",
            "the database was lost while this request was being handled; it may have been"
            " applied: retry with the same key after Retry-After",
            headers=retry,
        ).response()
    return Problem(
        503,
        "storage-unavailable",
        "Database unavailable",
        "the database cannot be reached; nothing was done: retry with the same key after"
        " Retry-After",
        headers=retry,
    ).response()


def _key_reused() -> Problem:
    return Problem(
        422,
        "idempotency-key-reused",
        "Idempotency-Key reused",
        "this key was used for a different request (method, path or body)",
    )


def _method_not_allowed(allow: str) -> Problem:
    return Problem(
        405,
        "method-not-allowed",
        "Method not allowed",
        f"allowed: {allow}",
        headers=(("allow", allow),),
    )
