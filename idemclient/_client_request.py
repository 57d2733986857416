"""`Client.request` (and so `post`, `put`, `patch`, `delete`), written once for both
clients: one operation, from the caller's options to its outcome. `Client` runs the
step in the calling thread, `AsyncClient` awaits it (see `_operations.run`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from ._deferred import opened, unopened
from ._hooks import Hooks
from ._operations import (
    Blocking,
    Http,
    Op,
    check_method,
    key_in_json,
    request_options,
    sent_by,
    sent_headers,
    settle,
    target_url,
)
from ._outcome import Outcome, from_record
from ._resume import read_existing
from ._settings import Settings

__all__ = ["request", "stored"]


def request(
    settings: Settings,
    http: httpx.Client | httpx.AsyncClient,
    method: str,
    url: httpx.URL | str,
    *,
    key: str | None,
    operation_id: str | None,
    identity: str | Sequence[str] | None,
    reference: str | None,
    hooks: Hooks | None,
    headers: Any,
    extensions: Any,
    options: dict[str, Any],
) -> Op[Outcome]:
    """Run one operation to its outcome: the step of `Client.request` (see there).
    `options` are httpx's own (`json`, `content`, `params`, `timeout`...)."""
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
    profile = resolved.profile
    if not resolved.keyed:
        # Sent, it would carry a key the server does not read there, and a retry of
        # it would be a second request to the server.
        raise ValueError(
            f"the {profile.name} profile's server takes no idempotency key at"
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
    if unopened(settings.store):
        # Opened (an async client's in a worker thread) before httpx sees the
        # request: a store that cannot be opened fails before any hook of httpx's
        # says a request is going out.
        yield Blocking(opened, (settings.store,))
    if resolved.key.field is not None:
        # The key goes in the body, before the request is built (an auth flow that
        # signs the body signs the key too); a re-issued operation's is its own.
        known = None
        if operation_id is not None and chosen is None:
            records = yield Blocking(settings.store.find, kwargs={"operation_ids": [operation_id]})
            known = records[0].key if records else None
        source = "identity=" if identity is not None else "key="
        options = key_in_json(
            resolved,
            chosen,
            known,
            options,
            source=source,
            headers=sent_headers(http, merged),
        )
    options["headers"] = merged
    options["extensions"] = extended
    sent = yield from sent_by(Http("request", (method, url), options))
    if profile.existing is not None:
        # Only a profile whose server answers "already done, here it is" needs the
        # operation's URL again (building a request costs as much as the rest of
        # the client's work on one).
        sent = yield from read_existing(settings, sent, target)
    return settle(sent)


def stored(settings: Settings, operation_id: str) -> Op[Outcome | None]:
    """What the store knows of an operation, without any network call."""
    record = yield Blocking(settings.store.get, (operation_id,))
    return None if record is None else from_record(record)
