"""Settling an operation by looking it up on the server, without sending it again.

An operation that may have been applied but has no final answer cannot always be
resumed: the server may have forgotten its key (`ReconcileRequired`). The server still
knows its payments, though. A look-up by the operation's end-to-end reference (or by
its key, while the server keeps keys) says which it is. One judgement of the look-up's
answer (`judge`) serves `Client.reconcile` and the batch command alike:

- a 2xx with an empty list (`[]`, or `{"data": []}`): not found, never applied, unless
  it says more pages follow (`has_more`, a next page or cursor, `Link: rel=next`): a
  page cut short says nothing of the others, so that is unknown;
- a 2xx naming one payment (a list of one, or the payment itself): found, and its
  status decides what it came to;
- a 2xx naming several payments: ambiguous, for a person to settle;
- a 404: not found only when the caller says the look-up is reliable; otherwise
  unknown, since a 404 is as likely a wrong URL as a missing payment;
- anything else (another status, a body that is not JSON, no answer): unknown.

A found payment's status (`status` by default) decides what it came to, through a
mapping the caller may replace (`DEFAULT_STATUSES`): only `succeeded` and `completed`
are `succeeded`, `failed` and `declined` are `failed`; any other status (`pending`,
`processing`, `authorized`, none at all) is not final, and the operation stays
unsettled. A caller that knows what its rows hold (the batch) also passes `matches`:
a payment with other content is not this operation (finding `mismatch`).

What a finding does to a stored operation (`apply`):

- found, final: the operation is settled as `succeeded` or `failed`, with the
  look-up's answer as its response;
- found, not final: it stays unsettled, and is now "maybe applied" (the server holds
  it), so it is never sent again blindly;
- not found, when the operation keeps an answer its profile reads as a replay that
  no attempt of ours explained (`replay_unexplained`: another sender's payment under
  the key, or the application's own refusal, django-idempotency-key's 409), and the
  look-up is by reference alone: that answer was the refusal, and the operation is
  settled `failed`, with it as its answer (`refused`); unless that answer's body names
  a payment (`kept_payment`): then, by any look-up, it stays unsettled; else
- not found: it becomes `not_sent` and is no longer "maybe applied", so it may be
  sent again with its key; unless an attempt that may have been applied was sent
  less than the server profile's `in_flight_for` ago (`last_sent`), plus the clock skew
  allowed between the store's hosts (`_call.in_flight_until`: a send stamped by a slow
  host is later than it looks): the server may still be running it (a request it
  admitted and had not begun, a crash its recovery finishes), so nothing found yet is
  not "never applied", and it stays unsettled (`too_early`);
- anything else: unchanged, for a person to settle.

The decisions are pure functions here; the store's half takes a store and a clock, and
the clients do the network's half.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import quote

import httpx

from ._answer import stored_response
from ._call import CLOCK_SKEW, LEASE_MARGIN, in_flight_until
from ._clock import Clock
from ._errors import Indeterminate
from ._outcome import Outcome, State, from_record
from ._profile import Existing
from ._server_time import DATE_RESOLUTION, ServerTime, held_until, over_by_server, parse_date
from ._store import (
    Claim,
    OperationRecord,
    Progress,
    SendingStore,
    StoredResponse,
    new_owner,
    owner_sent_until,
    release_owner,
)

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_STATUSES",
    "Finding",
    "LookupRules",
    "Taken",
    "Unquotable",
    "Verdict",
    "apply",
    "by_reference_alone",
    "default_found",
    "judge",
    "judge_found",
    "judge_resource",
    "kept_payment",
    "listed",
    "lookup_url",
    "refused",
    "release",
    "settle_found",
    "take",
]

Finding = Literal["found", "not_found", "mismatch", "ambiguous", "unknown"]

#: A payment's status on the server -> what the operation came to. Any status not
#: listed is not final: the operation stays unsettled.
DEFAULT_STATUSES: Mapping[str, State] = MappingProxyType(
    {
        "succeeded": State.SUCCEEDED,
        "completed": State.SUCCEEDED,
        "failed": State.FAILED,
        "declined": State.FAILED,
    }
)


@dataclass(frozen=True, slots=True)
class LookupRules:
    """How to read a look-up's answer.

    `statuses` maps a payment's status (compared without regard to case) to
    `State.SUCCEEDED` or `State.FAILED`; `status_field` is where the status is;
    `reliable_404`: the caller says a 404 from this look-up means "no such payment"
    (otherwise it means the look-up does not work).
    """

    statuses: Mapping[str, State] = field(default_factory=lambda: DEFAULT_STATUSES)
    status_field: str = "status"
    reliable_404: bool = False

    def __post_init__(self) -> None:
        lowered: dict[str, State] = {}
        for name, state in self.statuses.items():
            if State(state) not in (State.SUCCEEDED, State.FAILED):
                raise ValueError(
                    f"status {name!r} maps to {State(state).value}: a found payment is"
                    " succeeded or failed; leave statuses that are not final out"
                )
            lowered[name.strip().lower()] = State(state)
        object.__setattr__(self, "statuses", MappingProxyType(lowered))
        if not self.status_field:
            raise ValueError("status_field must name a field")


DEFAULT_RULES = LookupRules()

Item = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a look-up's answer says about one operation."""

    finding: Finding
    #: in words, for records, reports and errors
    why: str
    #: found: what the payment came to (`succeeded`, `failed`), None while not final
    state: State | None = None
    #: found: the payment
    item: Item | None = None
    #: mismatch and ambiguous: the payments the look-up named
    others: tuple[Item, ...] = ()

    @property
    def settles(self) -> bool:
        """The answer is definite: found with a final status, or not found."""
        return self.finding == "not_found" or (self.finding == "found" and self.state is not None)


class Unquotable(ValueError):
    """A value the look-up's template cannot carry safely: the look-up is not made, and
    the operation stays as it was (never "not found")."""


def lookup_url(template: str, record: OperationRecord, *, quoting: str | None = None) -> str:
    """`template` with `{key}` and `{reference}` filled in (see `fill`); a template that
    starts with `{path}` is the operation's own URL (its origin and path) and the rest."""
    if template.startswith("{path}"):
        own = httpx.URL(record.url).copy_with(query=None, fragment=None)
        template = str(own).replace("{", "{{").replace("}", "}}") + template[len("{path}") :]
    return fill(
        template,
        key=record.key,
        reference=record.reference,
        name=record.operation_id,
        quoting=quoting,
    )


#: A slot right after one of these is inside a quoted string of a search query.
_OPENING_QUOTES = ("'", '"', "%27", "%22")


def quoting_of(template: str) -> str:
    """How `template` quotes its slots when it does not say: "search" if a slot sits
    right after a quote (``'{reference}'``, ``%27{reference}%27``), else "url"."""
    lowered = template.lower()
    for slot in ("{reference}", "{key}"):
        at = lowered.find(slot)
        while at != -1:
            if lowered[:at].endswith(_OPENING_QUOTES):
                return "search"
            at = lowered.find(slot, at + 1)
    return "url"


def search_string(value: str, name: str) -> str:
    """`value` as the inside of a quoted string of a search query (Stripe's syntax: a
    quote escaped with a backslash). A backslash or a control character is refused:
    how the server would read it is not published, and a look-up that reads another
    value could match another payment, or none."""
    for char in value:
        if char == "\\" or ord(char) < 0x20 or ord(char) == 0x7F:
            raise Unquotable(
                f"operation {name!r}: its reference {value!r} holds {char!r}, which a"
                " search query's quoted string cannot carry safely; the look-up was not"
                " made. Settle it by hand, or look it up by {key}"
            )
    return value.replace("'", "\\'").replace('"', '\\"')


def fill(
    template: str, *, key: str, reference: str | None, name: str, quoting: str | None = None
) -> str:
    """`template` with `{key}` and `{reference}` filled in, URL-quoted, and first
    escaped as a search query's quoted string where `quoting` (or, None, the template
    itself: `quoting_of`) says "search"; `name` is the operation's, for errors.
    Raises `Unquotable` for a value the template cannot carry safely."""
    if "{reference}" in template and not reference:
        raise ValueError(
            f"operation {name!r} has no end-to-end reference to look up;"
            " use a look-up by {key} instead"
        )
    if (quoting or quoting_of(template)) == "search":
        key = search_string(key, name)
        reference = search_string(reference, name) if reference else reference
    try:
        return template.format(key=quote(key, safe=""), reference=quote(reference or "", safe=""))
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"look-up {template!r} may only use {{key}} and {{reference}}: {exc}"
        ) from None


def status_of(item: Item, rules: LookupRules) -> tuple[str | None, State | None]:
    """The payment's status as written, and what it came to (None: not final)."""
    value = item.get(rules.status_field)
    if not isinstance(value, str):
        return None, None
    return value, rules.statuses.get(value.strip().lower())


def listed(response: httpx.Response) -> list[Item] | str:
    """The payments a 2xx answer names, or why they cannot be read (a body that is
    not JSON, neither a list nor a payment, a list whose items are not payments)."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return "a body that is not JSON"
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        listed: object = body["data"]
    elif isinstance(body, list):
        listed = body
    elif isinstance(body, dict) and body:
        listed = [body]  # a look-up that answers with the payment itself
    else:
        return "neither a list nor a payment"
    assert isinstance(listed, list)
    if not all(isinstance(item, dict) and item for item in listed):
        return "a list whose items are not payments"
    return listed


#: Fields with which a list answer says that more pages follow (Stripe, Mollie, and
#: cursor APIs generally).
_MORE = ("has_more", "next_page", "next_page_url", "next", "next_cursor", "nextCursor")


def _more_follow(response: httpx.Response) -> str | None:
    """How the answer says it is one page of several (None: it is the whole answer).
    A page cut short says nothing of what is on the others: "no match" on it is not
    "not found"."""
    if 'rel="next"' in response.headers.get("link", "").replace("'", '"'):
        return "a Link header with rel=next"
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for name in _MORE:
        value = body.get(name)
        if value not in (None, False, "", 0):
            return f"{name}: {value!r}"
    return None


def _described(item: Item, rules: LookupRules) -> str:
    status, _ = status_of(item, rules)
    name = item.get("id")
    shown = f"payment {name}" if isinstance(name, str | int) else "a payment"
    return f"{shown} with status {status!r}" if status is not None else f"{shown} with no status"


def judge(
    response: httpx.Response,
    rules: LookupRules = DEFAULT_RULES,
    *,
    matches: Callable[[Item], bool] | None = None,
) -> Verdict:
    """What `response`, the answer to a look-up, says (see the module docstring).

    `matches` says whether a payment the look-up names has this operation's content;
    without it, every payment named counts.
    """
    code = response.status_code
    if code == 404:
        if rules.reliable_404:
            return Verdict("not_found", "HTTP 404, which this look-up says means no such payment")
        return Verdict(
            "unknown",
            "HTTP 404: the look-up itself was not found (a wrong URL, path or look-up"
            " template?); a 404 means 'no such payment' only for a look-up said to be"
            " reliable",
        )
    if not 200 <= code < 300:
        return Verdict("unknown", f"HTTP {code}")
    items = listed(response)
    if isinstance(items, str):
        return Verdict("unknown", f"HTTP {code} with {items}")
    partial = _more_follow(response)
    if not items:
        if partial:
            return Verdict("unknown", f"HTTP {code} with an empty page of several ({partial})")
        return Verdict("not_found", f"HTTP {code} with no match")
    if matches is not None:
        same = [item for item in items if matches(item)]
        if not same:
            if partial:
                return Verdict(
                    "unknown",
                    f"HTTP {code} with one page of several ({partial}) and no payment of"
                    " this content on it",
                )
            return Verdict(
                "mismatch",
                f"HTTP {code} naming {len(items)} payment(s) with other content",
                others=tuple(items),
            )
        if len(same) > 1:
            return Verdict(
                "ambiguous",
                f"HTTP {code} naming {len(same)} payments with this content",
                others=tuple(same),
            )
        items = same
    states = {status_of(item, rules)[1] for item in items}
    if len(items) > 1 and len(states) > 1:
        return Verdict(
            "ambiguous",
            f"HTTP {code} naming {len(items)} payments that came to different ends",
            others=tuple(items),
        )
    item = items[0]
    (state,) = states
    ending = "" if state is not None else ", which is not final"
    return Verdict(
        "found", f"HTTP {code}: {_described(item, rules)}{ending}", state=state, item=item
    )


def judge_resource(response: httpx.Response, rules: LookupRules) -> Verdict:
    """What a fetched resource says of the payment it is: pure. Only a 2xx with a JSON
    object is read (the object itself, or the one object it wraps the resource in); its
    status decides, through `rules`, and a status that is not final (or none) is found
    but not final. Anything else is unknown: a resource the server named is never
    "not found"."""
    code = response.status_code
    if not 200 <= code < 300:
        return Verdict("unknown", f"HTTP {code}")
    try:
        body = json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        return Verdict("unknown", f"HTTP {code} with a body that is not JSON")
    if not isinstance(body, dict) or not body:
        return Verdict("unknown", f"HTTP {code} with a body that is not a resource")
    item: Item = body
    if rules.status_field not in body and len(body) == 1:
        (inner,) = body.values()
        if isinstance(inner, dict):
            item = inner  # an envelope: {"payments": {...}}
    _, state = status_of(item, rules)
    ending = "" if state is not None else ", which is not final"
    return Verdict(
        "found", f"HTTP {code}: {_described(item, rules)}{ending}", state=state, item=item
    )


def judge_created(response: httpx.Response, existing: Existing) -> Verdict:
    """What the resource an "already done, here it is" answer named says of the request
    that made it (see `Existing`): pure. The answer that request would have had is the
    resource, made: found, `succeeded`, whatever its status (the payment's own life
    since), unless its status is one the profile says only a refused creation leaves
    (`failed`) or a creation still running has (`creating`: found, not final). A fetch
    that gives no resource (not a 2xx, not a JSON object) is unknown: the resource was
    named, so never "not found"."""
    read = judge_resource(response, LookupRules(status_field=existing.status_field, statuses={}))
    if read.finding != "found" or read.item is None:
        return read
    item = read.item
    value = item.get(existing.status_field)
    status = value.strip().lower() if isinstance(value, str) else None
    name = item.get("id")
    shown = f"payment {name}" if isinstance(name, str | int) else "the payment"
    code = response.status_code
    if status is not None and status in existing.failed:
        why = f"{shown} with status {value!r}: the server refused the request that made it"
        return Verdict("found", f"HTTP {code}: {why}", state=State.FAILED, item=item)
    if status is not None and status in existing.creating:
        why = f"{shown} with status {value!r}: the request that makes it is still running"
        return Verdict("found", f"HTTP {code}: {why}", item=item)
    since = "" if value is None else f" (its status since: {value!r})"
    why = f"{shown}, made under this key: the request that made it succeeded{since}"
    return Verdict("found", f"HTTP {code}: {why}", state=State.SUCCEEDED, item=item)


def judge_found(response: httpx.Response, found: Callable[[httpx.Response], bool]) -> Verdict:
    """The judgement of a caller's own `found` (deprecated): True is a payment that
    succeeded, False is none; statuses other than 2xx judge as `judge` does."""
    if not 200 <= response.status_code < 300:
        return judge(response)
    if found(response):
        return Verdict("found", f"HTTP {response.status_code}, found", state=State.SUCCEEDED)
    return Verdict("not_found", f"HTTP {response.status_code}, not found")


def default_found(response: httpx.Response) -> bool:
    """The judgement `found=` used to default to: any 2xx naming something. Kept for
    callers that passed it explicitly; `judge` reads the payment's status instead."""
    items = listed(response)
    return not isinstance(items, str) and bool(items)


# -- the store's half ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taken:
    """An unfinished operation leased for a look-up: as it was, and by whom."""

    before: OperationRecord
    owner: str
    #: when it was leased: a look-up asked right after is judged as of then
    at: float | None = None


def take(store: SendingStore, clock: Clock, operation_id: str) -> Taken | Outcome:
    """Lease an unfinished operation for a look-up; a finished one is its outcome.
    Raises `Indeterminate` when another caller holds it, `ValueError` if unknown."""
    before = store.get(operation_id)
    if before is None:
        raise ValueError(f"no operation {operation_id!r} in {store.path}")
    if before.state.finished:
        return from_record(before)
    owner = new_owner()
    now = clock.time()
    try:
        # A look-up's lease, not a send's: the operation keeps its state, and a
        # takeover of it (this process killed while it waits for the server) counts
        # no send, so it neither makes the operation maybe applied nor moves its send
        # time, which would put off the next look-up's verdict by in_flight_for.
        begin = store.claim(
            operation_id, owner=owner, now=now, lease_until=now + LEASE_MARGIN, look_up=True
        )
    except BaseException:
        release_owner(owner)
        raise
    if begin.claim is Claim.FINISHED:
        release_owner(owner)
        return from_record(begin.record)
    if begin.claim is Claim.BUSY:
        release_owner(owner)
        doing = "looked up" if begin.record.lease_look_up else "sent"
        raise unsettled(before, f"it is being {doing} by another caller right now")
    # Judged, and given back, as it was when leased: another caller may have sent it
    # since `before` was read (then a look-up's "none" may be too early).
    return Taken(begin.prior or before, owner, now)


def release(store: SendingStore, clock: Clock, taken: Taken, *, exists: bool = False) -> None:
    """Give the operation back as it was; `exists`: the server holds it, not final yet,
    so it is maybe applied from now on (and never `not_sent`)."""
    before = taken.before
    state = before.state
    if exists and state in (State.PENDING, State.NOT_SENT, State.IN_FLIGHT):
        state = State.INDETERMINATE
    try:
        _give_back(store, clock, taken, state, exists)
    finally:
        release_owner(taken.owner)


def _give_back(store: SendingStore, clock: Clock, taken: Taken, state: State, exists: bool) -> None:
    before = taken.before
    now = clock.time()
    sent = last_sent(before, now=now)
    store.finish(
        before.operation_id,
        owner=taken.owner,
        state=state,
        progress=Progress(
            attempts=before.attempts,
            maybe_applied=before.maybe_applied or exists,
            evidence=before.evidence,
            not_before=before.not_before,
            now=now,
            # Kept as a time of its own: this write's time is no send.
            sent_at=sent,
            # ... with the server's time at it, where it is the send the record keeps.
            server_sent_at=before.server_sent_at if sent == before.sent_at else None,
        ),
    )


def last_sent(record: OperationRecord, *, now: float) -> float | None:
    """The latest time an attempt of `record` that may have been applied was (or may
    have been) sent; None if none may have been. An owner in flight may be sending
    until its lease's end, or, dead or out of its lease, may have sent until now; a
    record written before `sent_at` was kept has its last write's time instead."""
    owner = owner_sent_until(record, now=now)
    if not record.maybe_applied and owner is None:
        return None
    sent = record.updated_at if record.sent_at is None else record.sent_at
    return sent if owner is None else max(sent, owner)


def still_in_flight(
    record: OperationRecord,
    *,
    now: float,
    in_flight_for: float,
    asked_at: float | None = None,
    server_at: float | None = None,
    watched_since: float | None = None,
) -> float | None:
    """When a look-up that finds nothing will say "never applied": None if it says so
    now, else the time from which it will (the last attempt that may have been
    applied, plus the profile's `in_flight_for` and the hosts' clock skew:
    `in_flight_until`). `asked_at`: when the look-up was asked, if before `now` (its
    "none" is as old as its question: an answer given within the window says nothing
    of a send the server ran after it, whenever it is read). `server_at`: the server's
    time when it answered (its `Date`), if it said: the window must be over by that
    clock too (this one may have been stepped forward since the send was stamped), and
    the time returned is when it is over by both, on this clock. `watched_since`: when
    the asking client started watching its clock; a send stamped since is judged by
    this clock alone (see `Settings.watched`)."""
    sent = last_sent(record, now=now)
    if sent is None:
        return None
    if watched_since is not None and sent >= watched_since:
        server_at = None
    # The server's time at that send, where the record keeps it (not for a send an
    # owner in flight may have made since, which no one stamped).
    server_sent = record.server_sent_at if sent == record.sent_at else None
    until = in_flight_until(sent, in_flight_for)
    asked = now if asked_at is None else min(now, asked_at)
    if asked >= until and over_by_server(
        until, since=sent, server_at=server_at, server_since=server_sent
    ):
        return None
    server = None if server_at is None else ServerTime(server_at, server_at + DATE_RESOLUTION)
    # The server's time is its answer's, as close to the question as this clock knows.
    return held_until(until, since=sent, now=asked, server=server, server_since=server_sent)


def answered_at(response: httpx.Response | None) -> float | None:
    """The server's time as it answered `response` (its `Date`), or None."""
    if response is None:
        return None
    raw = response.headers.get("date")
    return None if raw is None else parse_date(raw)


def apply(
    store: SendingStore,
    clock: Clock,
    taken: Taken,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response | None,
    in_flight_for: float,
    asked_at: float | None = None,
    by_reference: bool = False,
    watched_since: float | None = None,
) -> Outcome:
    """Record what the look-up `where` (e.g. ``GET /v1/payments?reference=R``) found,
    and give the lease back. Raises `Indeterminate` when it settled nothing.
    `in_flight_for`: how long the server profile's server may still run an attempt
    after it was sent (`Profile.in_flight_for`). `asked_at`: when the look-up was asked
    (default: when `taken` was leased, just before it). `by_reference`: the look-up
    asks by the end-to-end reference alone (`by_reference_alone`), so its "none" holds
    after the server has forgotten the key (see `refused`)."""
    try:
        return _apply(
            store,
            clock,
            taken,
            verdict,
            where=where,
            response=response,
            in_flight_for=in_flight_for,
            asked_at=taken.at if asked_at is None else asked_at,
            by_reference=by_reference,
            watched_since=watched_since,
        )
    finally:
        release_owner(taken.owner)  # the look-up's call is over, whatever the store did


def _apply(
    store: SendingStore,
    clock: Clock,
    taken: Taken,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response | None,
    in_flight_for: float,
    asked_at: float | None,
    by_reference: bool,
    watched_since: float | None,
) -> Outcome:
    before = taken.before
    evidence = f"settled by look-up: {where}: {verdict.why}"
    if verdict.finding == "not_found":
        now = clock.time()
        until = still_in_flight(
            before,
            now=now,
            in_flight_for=in_flight_for,
            asked_at=asked_at,
            server_at=answered_at(response),
            watched_since=watched_since,
        )
        if until is not None:
            release(store, clock, taken)
            raise too_early(before, f"{where}: {verdict.why}", now=now, until=until)
        named = kept_payment(before)
        if named is not None:
            # The answer kept as maybe the application's refusal names a payment: the
            # replay of one the server made under this key. A look-up that does not
            # list it looks elsewhere (another collection, an index behind): its "none"
            # settles nothing, neither "refused" nor "never applied, send again".
            assert before.response is not None
            release(store, clock, taken, exists=True)
            raise unsettled(
                before,
                f"{where}: {verdict.why}; but the HTTP {before.response.status_code} it"
                f" was answered names {named}, a payment the server made under its key"
                " (a replay), which this look-up does not list: look that payment up",
            )
        if refused(before, by_reference=by_reference):
            return _settle_refused(store, clock, taken, f"{where}: {verdict.why}")
    if verdict.settles:
        applied = verdict.finding == "found"
        record = store.settle(
            before.operation_id,
            owner=taken.owner,
            applied=applied,
            evidence=evidence,
            now=clock.time(),
            response=StoredResponse.of(
                response.status_code, tuple(response.headers.multi_items()), response.content
            )
            if applied and response is not None
            else None,
            state=verdict.state or State.SUCCEEDED,
        )
        if not record.state.finished and record.evidence != evidence:
            # Not written: this look-up outlived its lease, and another caller took the
            # operation meanwhile (a send, maybe): it is as that caller has it, unsettled.
            raise unsettled(
                record,
                f"{where}: {verdict.why}; but another caller took the operation while it"
                " was being looked up (the look-up outlived its lease), so nothing was"
                f" recorded: it is {record.state.words}",
            )
        return settled(record, response)
    release(store, clock, taken, exists=verdict.finding == "found")
    raise unsettled(before, f"{where}: {verdict.why}")


def by_reference_alone(template: str) -> bool:
    """Whether a look-up `template` asks by the end-to-end reference alone: the server
    keeps its payments after it has forgotten their keys, so a "none" from it holds
    past the key retention; one that asks by `{key}` too may find nothing because the
    key is forgotten."""
    return "{reference}" in template and "{key}" not in template


def refused(record: OperationRecord, *, by_reference: bool) -> bool:
    """Whether a look-up's believed "none" (past the in-flight window: `still_in_flight`)
    settles `record` as refused: pure.

    Only where the operation keeps an answer its profile read as a replay that no
    attempt of ours explained (`replay_unexplained`, the answer kept with it): a
    replay is of a request the server applied under this key, so a payment (another
    sender's of this reference, or ours) that a look-up by reference finds for good;
    none found, the answer was the application's refusal of this request, and nothing
    of it was applied. A look-up that asks by key as well is not enough (the server may
    have forgotten the key, and a "none" says nothing then); an operation with no kept
    answer (recorded by an earlier version) is `not_sent`, sent again with its key, and
    keeps the answer the next time."""
    return by_reference and record.replay_unexplained and record.response is not None


def kept_payment(record: OperationRecord) -> str | None:
    """The id of the payment named by the answer `record` keeps as maybe the
    application's refusal (`replay_unexplained`), if its JSON body names one (a
    replay's body is the stored payment; the application's own refusal names none):
    pure."""
    kept = record.response
    if not record.replay_unexplained or kept is None or record.state.finished:
        return None
    try:
        body = json.loads(kept.body)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("data"), list) and len(body["data"]) == 1:
        body = body["data"][0]
    value = body.get("id") if isinstance(body, dict) else None
    return str(value) if isinstance(value, str | int) and str(value) else None


def _settle_refused(store: SendingStore, clock: Clock, taken: Taken, found: str) -> Outcome:
    before = taken.before
    kept = before.response
    assert kept is not None, "refused only with an answer kept"
    evidence = (
        f"HTTP {kept.status_code} refused by the application, not a replay: a look-up"
        f" found no payment ({found}), and no attempt of it can still be running: this"
        f" request was never applied. A {kept.status_code} is a conflict: what it"
        " conflicts with (its answer's body) may exist elsewhere, outside what the"
        " look-up searched; read it before paying this another way"
    )
    record = store.settle(
        before.operation_id,
        owner=taken.owner,
        applied=False,
        evidence=evidence,
        now=clock.time(),
        state=State.FAILED,
    )
    if not record.state.finished or record.evidence != evidence:
        if record.state.finished:
            return from_record(record)
        raise unsettled(
            record,
            f"{found}; but another caller took the operation while it was being looked up"
            f" (the look-up outlived its lease), so nothing was recorded: it is"
            f" {record.state.words}",
        )
    assert record.response is not None
    answer = stored_response(record.response, httpx.Request(record.method, record.url))
    return from_record(
        record,
        response=answer,
        from_store=False,
        not_before=None,
        last_status=kept.status_code,
    )


def settle_found(
    store: SendingStore,
    clock: Clock,
    operation_id: str,
    verdict: Verdict,
    *,
    where: str,
    response: httpx.Response,
) -> Outcome:
    """Settle an unfinished operation by what a resource the server named came to
    (`verdict` found, final): leased, recorded, given back. One that is finished
    already is its outcome; one another caller holds raises `Indeterminate`."""
    taken = take(store, clock, operation_id)
    if isinstance(taken, Outcome):
        # Settled by another caller meanwhile: its answer, as the store keeps it.
        record = store.get(operation_id)
        if record is not None and record.response is not None:
            return from_record(record, response=stored_response(record.response, response.request))
        return taken
    # Found, final: nothing of `in_flight_for` is asked (only "not found" waits for it).
    return apply(store, clock, taken, verdict, where=where, response=response, in_flight_for=0.0)


def too_early(record: OperationRecord, evidence: str, *, now: float, until: float) -> Indeterminate:
    """Nothing found, while the server may still be running an attempt of `record`."""
    sent = last_sent(record, now=now)
    assert sent is not None
    outcome = from_record(
        record, evidence=f"not found yet: {evidence}", body_omitted=False, not_before=until
    )
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) was not found by looking it"
        f" up ({evidence}), but an attempt of it that may have been applied was sent"
        f" {max(0.0, now - sent):.0f}s ago, and the server may still be running it"
        + (
            f" for {until - now:.0f}s more"
            if until > now
            else " (it may have run it since the look-up was asked)"
        )
        + f" (the server profile's in_flight_for, and"
        f" {CLOCK_SKEW:.0f}s for the clocks of the store's hosts): not found yet is"
        " not never applied. It stays unsettled: look it up again after that, or resume"
        " it (sent again with its key while the server keeps the key, it is the same"
        " payment).",
        outcome,
    )


def unsettled(record: OperationRecord, evidence: str) -> Indeterminate:
    outcome = from_record(record, evidence=evidence, body_omitted=False)
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) could not be settled by"
        f" looking it up: {evidence}. Settle it by hand against the server's records.",
        outcome,
    )


def settled(record: OperationRecord, response: httpx.Response | None) -> Outcome:
    return from_record(
        record,
        response=response if record.state.finished else None,
        from_store=False,
        not_before=None,
        body_omitted=False,
        last_status=None if response is None else response.status_code,
    )
