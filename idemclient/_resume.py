"""Operations read back from the store: `resume()` (every unfinished operation sent
again, with its key), and an "already done, here it is" answer read as the operation's
own (`read_existing`)."""

from __future__ import annotations

import dataclasses

import httpx

from . import _reconcile
from ._errors import Indeterminate
from ._hooks import log_fields, logger
from ._operations import Blocking, Close, Http, Op, Sent, arun, run, send_registered, settings_of
from ._outcome import Outcome, from_record
from ._profile import existing_url
from ._redaction import origin_of
from ._settings import Settings
from ._store import OperationRecord, as_admin

__all__ = ["aresume", "read_existing", "resume", "resumed"]


def _not_resumed(record: OperationRecord, reason: str) -> Outcome:
    """The outcome of an operation a resume refused to send: as the store has it."""
    logger.warning(
        "operation %r not resumed: %s",
        record.operation_id,
        reason,
        extra=log_fields(
            "not_resumed",
            operation_id=record.operation_id,
            key=record.key,
            state=record.state.value,
            evidence=reason,
        ),
    )
    return from_record(record, evidence=f"not resumed: {reason}")


def _moved(settings: Settings, record: OperationRecord, origin: str | None) -> OperationRecord:
    """`record`, bound to `origin` first if one is asked for (an explicit move). Not
    moved (a ValueError) where it would be sent under another profile than its own: the
    chosen one contradicting the provider of the new host (`ProfileMismatch`), or the
    one that host speaks for a client that chose none."""
    if origin is None or origin_of(origin) == origin_of(record.url):
        return record
    target = httpx.URL(origin)
    to = httpx.URL(record.url).copy_with(scheme=target.scheme, host=target.host, port=target.port)
    speaks = settings.resolve_url(record.method, to).profile.name
    was_under = record.profile or "generic"
    if speaks != was_under:
        raise ValueError(
            f"operation {record.operation_id!r} was sent under the {was_under} server"
            f" profile; at {to.host} this client speaks {speaks}. It is not moved there:"
            " an operation is never sent on under another profile"
        )
    store = as_admin(settings.store, needed_by="resume(origin=...), which moves operations")
    return store.move(record.operation_id, origin=origin, now=settings.clock.time())


def _check_own_origin(client: httpx.Client | httpx.AsyncClient, record: OperationRecord) -> None:
    """Not sent (a ValueError) where the client has a `base_url` of another origin than
    the operation's: its credentials (headers, auth) are that origin's, and a store that
    two clients share (two providers, a sandbox and production) holds operations of
    both; sent with this client's, the other origin would be given its secret. Moved
    with `origin=` it goes to this one; a client of its own origin resumes it as it is."""
    base = client.base_url
    if not base.host:
        return  # a client of absolute URLs: each operation went where its caller sent it
    bound, own = origin_of(record.url), origin_of(base)
    if bound != own:
        raise ValueError(
            f"operation {record.operation_id!r} is bound to {bound}; this client's"
            f" base_url is {own}, whose credentials it carries, so it is not sent to"
            f" {bound} with them. Resume it with a client of {bound}, or move it here"
            f" with resume(origin={own!r})"
        )


def _check_origin(origin: str | None) -> None:
    if origin is not None:
        parsed = httpx.URL(origin)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"origin {origin!r} must be an http(s) URL with a host")


def read_existing(settings: Settings, sent: Sent, url: httpx.URL) -> Op[Sent]:
    """`sent`, once the resource an "already done, here it is" answer names (GoCardless)
    is read: fetched through the client (with its auth) from `url`, the operation's.
    The resource is the answer the request that made it would have had: `succeeded`,
    with the resource as its response, whatever its status (the payment's life since,
    for the application to read); `failed` only for a status the profile says a refused
    creation leaves (see `Existing`). A creation still running, or a fetch that fails,
    leaves it `indeterminate` (maybe applied: never "not sent"), to resume later."""
    existing = settings.profile_at(url).existing
    error = sent.error
    if existing is None or not isinstance(error, Indeterminate) or error.outcome.existing is None:
        return sent
    before = error.outcome
    named = before.existing
    assert named is not None
    where = existing_url(url, existing.fetch, named)
    try:
        fetched: httpx.Response = yield Http("get", (where,))
    except httpx.HTTPError as exc:
        verdict = _reconcile.Verdict("unknown", f"no answer ({type(exc).__name__}: {exc})")
        fetched_or_none: httpx.Response | None = None
    else:
        verdict = _reconcile.judge_created(fetched, existing)
        fetched_or_none = fetched
    if fetched_or_none is not None and verdict.settles:
        outcome: Outcome = yield Blocking(
            _reconcile.settle_found,
            (settings.store, settings.clock, before.operation_id, verdict),
            {"where": f"GET {where}", "response": fetched_or_none},
        )
        outcome = dataclasses.replace(outcome, existing=named)
        settings.hooks.outcome(outcome)
        return Sent(outcome, response=fetched_or_none)
    why = (
        f"the server says it made {named} under key {before.key} already, and GET {where}"
        f" says {verdict.why}: not the answer to the request that made it. It is never"
        " sent as new: resume it (or Client.reconcile) later"
    )
    logger.warning("operation %r: %s", before.operation_id, why)
    unsettled = dataclasses.replace(before, evidence=why)
    return Sent(
        unsettled, error=Indeterminate(f"operation {before.operation_id!r}: {why}", unsettled)
    )


def resumed(
    client: httpx.Client | httpx.AsyncClient, limit: int | None, origin: str | None
) -> Op[list[Outcome]]:
    """`resume` and `aresume`, as one step (see `_operations`)."""
    _check_origin(origin)
    settings = settings_of(client)
    records = yield Blocking(settings.store.unfinished, kwargs={"limit": limit})
    outcomes = []
    for stored in records:
        try:
            if origin is None:
                _check_own_origin(client, stored)
            record = yield Blocking(_moved, (settings, stored, origin))
            sent = yield from send_registered(client, record)
            sent = yield from read_existing(settings, sent, httpx.URL(record.url))
        except ValueError as exc:  # refused before sending: the operation is as it was
            outcomes.append(_not_resumed(stored, str(exc)))
            continue
        if sent.response is not None:
            yield Close(sent.response)
        outcomes.append(sent.outcome or from_record(record))
    return outcomes


def resume(
    client: httpx.Client, *, limit: int | None = None, origin: str | None = None
) -> list[Outcome]:
    """Finish the unfinished operations of a wrapped client's store, oldest first.

    Each is sent again with its original key, method, URL and body, to the origin
    (scheme, host, port) it was first sent to; the live client supplies credentials
    (which are never stored). A client with a `base_url` resumes only the operations of
    its own origin: one bound to another (a second provider's sharing the store, a
    sandbox's) is not sent there with this client's credentials, and its outcome says
    so. Returns one `Outcome` per operation, including those that are still not sent or
    indeterminate, and those another process is sending right now (state `in_flight`).

    `origin` (``"https://api.psp.example"``) moves every unfinished operation bound to
    another origin there first, durably, and sends it there: the one way to move an
    operation, say from a sandbox to production. An operation the live client cannot
    send as it was sent (it lacks a header the store withheld, or a secret query
    parameter) is not sent: its outcome says why, in `evidence`.
    """
    return run(resumed(client, limit, origin), client)


async def aresume(
    client: httpx.AsyncClient, *, limit: int | None = None, origin: str | None = None
) -> list[Outcome]:
    """`resume` for an async client."""
    return await arun(resumed(client, limit, origin), client)
