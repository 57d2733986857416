"""`Client.reconcile`, written once for both clients: an unfinished operation settled
by looking it up on the server, never by sending it again. The store's half (the lease,
the verdict applied) is in `_reconcile`; the look-up's URL, the request and how its
answer is read are here."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping

import httpx

from . import _reconcile
from ._errors import OutcomeError, ReconcileRequired
from ._operations import Blocking, Http, Op
from ._outcome import Outcome, State, from_record
from ._profile import Lookup, Profile
from ._redaction import shown_url
from ._settings import Settings

__all__ = ["reconcile", "warn_if_found"]


def warn_if_found(found: Callable[[httpx.Response], bool] | None) -> None:
    """`found=` is deprecated: said at the caller's line (a client's `reconcile`)."""
    if found is not None:
        warnings.warn(
            "reconcile(found=...) is deprecated: the look-up's answer is judged by the"
            " payment's status; pass statuses= (and status_field=) instead",
            DeprecationWarning,
            stacklevel=3,
        )


def reconcile(
    settings: Settings,
    http: httpx.Client | httpx.AsyncClient,
    operation_id: str,
    *,
    lookup: str | None,
    statuses: Mapping[str, State] | None,
    status_field: str | None,
    reliable_404: bool,
    found: Callable[[httpx.Response], bool] | None,
) -> Op[Outcome]:
    """The step of `Client.reconcile` and `AsyncClient.reconcile` (see there)."""
    # The profile this client speaks where the operation was sent.
    record = yield Blocking(settings.store.get, (operation_id,))
    where = httpx.URL(record.url) if record is not None else http.base_url
    profile = settings.profile_at(where)
    profiled = profile.lookup
    quoting = None
    covering: Lookup | None = None
    if lookup is None:
        if profiled is None:
            raise ValueError(
                f"the {profile.name} profile knows no look-up: pass"
                " lookup= (a URL template with {reference} or {key})"
            )
        lookup, quoting, covering = profiled.template, profiled.quoting, profiled
        if statuses is None:
            statuses = {
                **dict.fromkeys(profiled.succeeded, State.SUCCEEDED),
                **dict.fromkeys(profiled.failed, State.FAILED),
            }
        status_field = status_field or profiled.status_field
    judgement = _judgement(found, statuses, status_field or "status", reliable_404)
    hooks = settings.hooks
    try:
        taken = yield Blocking(
            _lookup_of, (settings, operation_id, lookup, quoting, covering, profile)
        )
        if isinstance(taken, Outcome):
            hooks.outcome(taken)
            return taken
        lease, url = taken
        answer: httpx.Response | BaseException
        try:
            answer = yield Http("get", (url,))
        except httpx.TransportError as exc:
            answer = exc
        judged: Outcome = yield Blocking(
            _judged,
            (
                settings,
                lease,
                url,
                answer,
                judgement,
                lookup,
                profile,
            ),
        )
    except OutcomeError as unsettled:
        # Left unsettled (or refused): told as every outcome is, then raised.
        hooks.outcome(unsettled.outcome)
        raise
    # Settled (or found never applied): a log record, a span, and the gauge of
    # indeterminate operations down, as for an outcome of a call.
    hooks.outcome(judged)
    return judged


def _lookup_of(
    settings: Settings,
    operation_id: str,
    lookup: str,
    quoting: str | None,
    covering: Lookup | None,
    profile: Profile,
) -> tuple[_reconcile.Taken, str] | Outcome:
    """Lease an unfinished operation for a look-up, with the look-up's URL; a
    finished one is its outcome. A bad template fails before the lease is taken;
    a reference the template cannot carry safely, or an operation the profile's
    look-up (`covering`) does not find, leaves the operation as it was."""
    store = settings.store
    record = store.get(operation_id)
    if record is None:
        raise ValueError(f"no operation {operation_id!r} in {store.path}")
    if record.state.finished:
        return from_record(record)
    was_under, speaks = record.profile or "generic", profile.name
    if was_under != speaks:
        # Its server's in_flight_for (how long a "none" is too early to believe), its
        # look-up and its statuses are that profile's: judged by this client's, a
        # payment its server was still running could be settled never applied.
        raise ValueError(
            f"operation {operation_id!r} (key {record.key}) was sent under the"
            f" {was_under} server profile; this client speaks {speaks}. Nothing was"
            f" looked up or changed: reconcile it with a client with"
            f" profile={was_under!r}"
        )
    path = httpx.URL(record.url).path
    if covering is not None and not covering.covers_path(path):
        # "None found" there would say nothing of it: never read as "not applied".
        raise ReconcileRequired(
            f"operation {operation_id!r} (key {record.key}) was sent to"
            f" {record.method} {path}, which the {profile.name}"
            f" profile's look-up ({covering.template}) does not find (it covers"
            f" {', '.join(covering.covers)}). Nothing was looked up or changed:"
            " pass lookup= (a URL template with {reference} or {key}) that finds"
            " this operation's resource",
            from_record(record),
        )
    try:
        url = _reconcile.lookup_url(lookup, record, quoting=quoting)
    except _reconcile.Unquotable as exc:
        raise _reconcile.unsettled(record, str(exc)) from exc
    taken = _reconcile.take(store, settings.clock, operation_id)
    if isinstance(taken, Outcome):
        return taken
    return taken, url


def _judged(
    settings: Settings,
    taken: _reconcile.Taken,
    url: str,
    response: httpx.Response | BaseException,
    judgement: Callable[[httpx.Response], _reconcile.Verdict],
    lookup: str,
    profile: Profile,
) -> Outcome:
    store, clock = settings.store, settings.clock
    if isinstance(response, BaseException):
        _reconcile.release(store, clock, taken)
        raise _reconcile.unsettled(
            taken.before, f"GET {shown_url(url)} failed: {type(response).__name__}"
        ) from response
    verdict = judgement(response)
    reference = taken.before.reference
    return _reconcile.apply(
        store,
        clock,
        taken,
        verdict,
        where=f"GET {shown_url(url)}",
        response=response,
        in_flight_for=profile.in_flight_for,
        by_reference=_reconcile.by_reference_alone(lookup),
        # A server finds a payment by a reference it was sent: by one the request never
        # carried, it finds none whether the payment was made or not.
        uncarried=reference
        if reference and "{reference}" in lookup and not _reconcile.carried(reference, taken.before)
        else None,
        watched_since=settings.watched_since,
    )


def _judgement(
    found: Callable[[httpx.Response], bool] | None,
    statuses: Mapping[str, State] | None,
    status_field: str,
    reliable_404: bool,
) -> Callable[[httpx.Response], _reconcile.Verdict]:
    """How `reconcile` reads the look-up's answer (see `_reconcile.judge`)."""
    if found is not None:
        return functools.partial(_reconcile.judge_found, found=found)
    rules = _reconcile.LookupRules(
        statuses=_reconcile.DEFAULT_STATUSES if statuses is None else statuses,
        status_field=status_field,
        reliable_404=reliable_404,
    )
    return functools.partial(_reconcile.judge, rules=rules)
