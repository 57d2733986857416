"""`Client.request` (and so `post`, `put`, `patch`, `delete`) and its async twin: one
operation, from the caller's options to its outcome.

Two thin twins over shared steps: `request` runs in the calling thread, calling the
store and httpx directly; `arequest` awaits httpx, and runs the store's calls (opening a
deferred store, finding a re-issued operation's key) in a worker thread. Everything they
decide is decided once, in the plain functions both call (`_prepared`, `_json_with_key`,
`_known_key`, `_operations.sent_of`, `_operations.settle`); the twins only do it. No
effect, generator or driver stands between the caller's `post` and httpx's `request`:
an operation's step costs a function call, not a turn of a driver per step.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import httpx

from ._deferred import opened, unopened
from ._errors import AnswerNotKept, OutcomeError
from ._hooks import Hooks
from ._operations import (
    Blocking,
    Op,
    arun,
    check_method,
    key_in_json,
    new_sent,
    request_options,
    run,
    sent_headers,
    sent_of,
    settle,
    target_url,
)
from ._outcome import Outcome, from_record
from ._profile import Resolved
from ._resume import read_existing
from ._settings import Settings
from ._store import OperationStore
from ._worker import to_thread

__all__ = ["arequest", "request", "stored"]


def request(
    settings: Settings,
    http: httpx.Client,
    method: str,
    url: httpx.URL | str,
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    content: Any,
    data: Any,
    files: Any,
    json: Any,
    params: Any,
    headers: Any,
    cookies: Any,
    auth: Any,
    follow_redirects: Any,
    timeout: Any,
    extensions: Any,
) -> Outcome:
    """Run one operation to its outcome, in this thread: `Client.request` (see there).
    The arguments are `Client.request`'s, in its order; httpx's own are passed on as the
    caller gave them."""
    target, resolved, merged, extended, chosen = _prepared(
        settings,
        http,
        method,
        url,
        key,
        operation_id,
        identity,
        reference,
        hooks,
        headers,
        extensions,
    )
    store = settings.store
    if unopened(store):
        # Opened before httpx sees the request: a store that cannot be opened fails
        # before any hook of httpx's says a request is going out.
        opened(store)
    if resolved.key.field is not None:
        # The key goes in the body, before the request is built (an auth flow that
        # signs the body signs the key too); a re-issued operation's is its own.
        known = None
        if operation_id is not None and chosen is None:
            known = _known_key(store, operation_id)
        json = _json_with_key(
            http, resolved, chosen, known, identity, merged, content, data, files, json
        )
    try:
        response = http.request(
            method,
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=merged,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extended,
        )
    except OutcomeError as exc:
        sent = new_sent(exc.outcome, exc)
    except AnswerNotKept as exc:  # finished, its body not kept: the outcome says so
        sent = new_sent(exc.outcome)
    else:
        sent = sent_of(response)
        if sent.outcome is not None and not sent.outcome.state.finished:
            # Handed back to httpx and ended there: closed the way its client closes.
            response.close()
    if resolved.profile.existing is not None:
        # Only a profile whose server answers "already done, here it is" needs the
        # operation's URL again (building a request costs as much as the rest of
        # the client's work on one).
        sent = run(read_existing(settings, sent, target), http)
    return settle(sent)


async def arequest(
    settings: Settings,
    http: httpx.AsyncClient,
    method: str,
    url: httpx.URL | str,
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    content: Any,
    data: Any,
    files: Any,
    json: Any,
    params: Any,
    headers: Any,
    cookies: Any,
    auth: Any,
    follow_redirects: Any,
    timeout: Any,
    extensions: Any,
) -> Outcome:
    """`request`, awaited: `AsyncClient.request`. The store's calls run in a worker
    thread, so that opening it or reading it never blocks the event loop."""
    target, resolved, merged, extended, chosen = _prepared(
        settings,
        http,
        method,
        url,
        key,
        operation_id,
        identity,
        reference,
        hooks,
        headers,
        extensions,
    )
    store = settings.store
    if unopened(store):
        # Opened in a worker thread, before httpx sees the request (see `request`).
        await to_thread(functools.partial(opened, store))
    if resolved.key.field is not None:
        known = None
        if operation_id is not None and chosen is None:
            known = await to_thread(functools.partial(_known_key, store, operation_id))
        json = _json_with_key(
            http, resolved, chosen, known, identity, merged, content, data, files, json
        )
    try:
        response = await http.request(
            method,
            url,
            content=content,
            data=data,
            files=files,
            json=json,
            params=params,
            headers=merged,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extended,
        )
    except OutcomeError as exc:
        sent = new_sent(exc.outcome, exc)
    except AnswerNotKept as exc:
        sent = new_sent(exc.outcome)
    else:
        sent = sent_of(response)
        if sent.outcome is not None and not sent.outcome.state.finished:
            await response.aclose()
    if resolved.profile.existing is not None:
        sent = await arun(read_existing(settings, sent, target), http)
    return settle(sent)


def _prepared(
    settings: Settings,
    http: httpx.Client | httpx.AsyncClient,
    method: str,
    url: httpx.URL | str,
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    headers: Any,
    extensions: Any,
) -> tuple[httpx.URL, Resolved, httpx.Headers | None, dict[str, Any], str | None]:
    """What an operation's request is, checked before anything is recorded or sent: its
    target, the profile's facts there, the headers and extensions it is sent with, and
    the key the caller chose (if any)."""
    target = target_url(http, url)
    # An operation's method must be one the policy gives keys to (under the profile its
    # host speaks): anything else would be sent with no key and no record, and could
    # not be retried safely.
    check_method(
        settings,
        method,
        then="; nothing was sent. Add it to RetryPolicy.methods if the server takes"
        " idempotency keys on it, or send it as a plain request with client.http",
        profile=settings.profile_at(target),
    )
    # Refused here, before anything is recorded, where the chosen profile
    # contradicts the provider of the target's host (`ProfileMismatch`).
    resolved = settings.resolve_url(method, target)
    if not resolved.keyed:
        # Sent, it would carry a key the server does not read there, and a retry of
        # it would be a second request to the server.
        raise ValueError(
            f"the {resolved.profile.name} profile's server takes no idempotency key at"
            f" {method.upper()} {target.path}; nothing was sent. Send it once as a"
            " plain request with client.http (it cannot be retried safely)"
        )
    merged, extended, chosen = request_options(
        key,
        operation_id,
        identity,
        reference,
        hooks,
        headers,
        extensions,
        resolved.key,
        defaults=http.headers,
    )
    return target, resolved, merged, extended, chosen


def _known_key(store: OperationStore, operation_id: str) -> str | None:
    """The key an operation issued again by its id was recorded with, if it was."""
    records = store.find(operation_ids=[operation_id])
    return records[0].key if records else None


def _json_with_key(
    http: httpx.Client | httpx.AsyncClient,
    resolved: Resolved,
    chosen: str | None,
    known: str | None,
    identity: str | Sequence[str] | None,
    merged: httpx.Headers | None,
    content: Any,
    data: Any,
    files: Any,
    json: Any,
) -> Any:
    """The JSON body with the key in the field the profile's server reads it from (see
    `_operations.key_in_json`, which refuses a body that cannot carry it)."""
    body = {"content": content, "data": data, "files": files, "json": json}
    return key_in_json(
        resolved,
        chosen,
        known,
        body,
        source="identity=" if identity is not None else "key=",
        headers=sent_headers(http, merged),
    )["json"]


def stored(settings: Settings, operation_id: str) -> Op[Outcome | None]:
    """What the store knows of an operation, without any network call."""
    record = yield Blocking(settings.store.get, (operation_id,))
    return None if record is None else from_record(record)
