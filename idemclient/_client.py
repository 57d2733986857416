"""`Client`: an httpx client whose unsafe requests are durable operations.

A `Client` is an `httpx.Client` whose transports are wrapped, plus methods that speak
in operations: `post(...)` returns an `Outcome`, and raises when the operation has no
final answer (`NotSent`, `Indeterminate`) or when the server says the key was used for
another request (`KeyConflict`). A final refusal (400, 402, 404...) is an answer, and
comes back as an `Outcome` in state `failed`, like an httpx response with that status.

Its methods are thin: `request` and its verbs call `_client_request.request` (whose
twin `AsyncClient` awaits, over the same shared steps); the others run a step written
once for both clients (`_client_reconcile`, `_resume`) in the calling thread, which
`AsyncClient` (`_async_client`) awaits. The two classes are twins by
hand, and a test holds their signatures the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import httpx

from . import _client_reconcile, _client_request
from ._async_client import AsyncClient
from ._budget import RetryBudget
from ._client_base import (
    USE_CLIENT_DEFAULT,
    AuthTypes,
    ClientBase,
    CookieTypes,
    HeaderTypes,
    QueryParamTypes,
    RequestContent,
    RequestData,
    RequestExtensions,
    RequestFiles,
    TimeoutTypes,
    UseClientDefault,
    given,
)
from ._clock import Clock
from ._hooks import Hooks
from ._operations import run
from ._outcome import Outcome, State
from ._policy import RetryPolicy
from ._profile import Profile
from ._resume import aresume, read_existing, resume, resumed
from ._transport import DEFAULT_MAX_REQUEST_BODY, make_settings
from ._wrap import StoreArg, start_store, wrap

__all__ = ["AsyncClient", "Client", "aresume", "read_existing", "resume", "wrap"]


class Client(ClientBase[httpx.Client]):
    """An httpx client whose unsafe requests are durable operations.

    `store` is a path to the SQLite store (created with mode 0600), a PostgreSQL URL
    (``postgresql://...``, see `idemclient.postgres`), or a `Store`.
    Everything else that `httpx.Client` takes (base_url, auth, headers, timeout,
    limits, verify, transport, mounts...) may be passed as keyword arguments, or pass
    an `httpx.Client` you built as `http`. `server_clock`, `time_probe`: see `wrap`.
    """

    def __init__(
        self,
        *,
        store: StoreArg,
        policy: RetryPolicy | None = None,
        clock: Clock | None = None,
        budget: RetryBudget | None = None,
        hooks: Hooks | None = None,
        max_request_body: int = DEFAULT_MAX_REQUEST_BODY,
        rng: random.Random | None = None,
        http: httpx.Client | None = None,
        secret_headers: Collection[str] = (),
        persist_headers: Collection[str] = (),
        profile: str | Profile | None = None,
        server_clock: bool = True,
        profile_by_host: bool = True,
        time_probe: bool = False,
        **httpx_options: Any,
    ) -> None:
        settings = make_settings(
            store,
            policy=policy,
            profile=profile,
            clock=clock,
            budget=budget,
            hooks=hooks,
            max_request_body=max_request_body,
            rng=rng,
            secret_headers=secret_headers,
            persist_headers=persist_headers,
            deferred=False,
            start=start_store,
            server_clock=server_clock,
            profile_by_host=profile_by_host,
            time_probe=time_probe,
        )
        super().__init__(settings, http, httpx.Client, httpx_options)

    def request(
        self,
        method: str,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> Outcome:
        """Run one operation to its outcome.

        - `key`: use this idempotency key as given (never replaced).
        - `identity`: derive the key from a natural identity (uuid5), e.g.
          ``("invoice-7", "charge")``: the same identity gives the same key anywhere.
        - `operation_id`: your name for the operation; issuing it again returns the
          stored final answer without a network call, or resumes it with its key and
          its recorded body (a body of the same meaning is sent as the bytes it was
          first sent with; one of another meaning raises `OperationMismatch`).
        - `reference`: the end-to-end reference, kept for reconciliation.
        - `hooks`: callbacks for this call only, beside the client's.
        - httpx's own: `content`, `data`, `files`, `json`, `params`, `headers`,
          `cookies`, `auth`, `follow_redirects`, `timeout`, `extensions`, as
          `httpx.Client.request` takes them.

        Returns the `Outcome` for a final answer (state `succeeded` or `failed`).
        Raises `NotSent`, `Indeterminate` (maybe applied) or `KeyConflict`.
        """
        return _client_request.request(
            self.settings,
            self.http,
            method,
            url,
            key,
            operation_id,
            identity,
            reference,
            hooks,
            content,
            data,
            files,
            json,
            params,
            headers,
            cookies,
            auth,
            follow_redirects,
            timeout,
            extensions,
        )

    def post(
        self,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> Outcome:
        """POST, as one operation: ``request("POST", url, ...)``.

        Takes every option of `request`: ``key``, ``operation_id``, ``identity``,
        ``reference`` and ``hooks`` (see there), and what httpx's ``request`` takes:
        ``content``, ``data``, ``files``, ``json``, ``params``, ``headers``,
        ``cookies``, ``auth``, ``follow_redirects``, ``timeout``, ``extensions``.

        Returns the `Outcome` of a final answer (check it:
        ``outcome.raise_for_status()``); raises `NotSent`, `Indeterminate` or
        `KeyConflict`.
        """
        return self._verb(
            "POST",
            url,
            key,
            operation_id,
            identity,
            reference,
            hooks,
            content,
            data,
            files,
            json,
            params,
            headers,
            cookies,
            auth,
            follow_redirects,
            timeout,
            extensions,
        )

    def patch(
        self,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> Outcome:
        """PATCH, as one operation: ``request("PATCH", url, ...)``, with the options of
        `post`."""
        return self._verb(
            "PATCH",
            url,
            key,
            operation_id,
            identity,
            reference,
            hooks,
            content,
            data,
            files,
            json,
            params,
            headers,
            cookies,
            auth,
            follow_redirects,
            timeout,
            extensions,
        )

    def put(
        self,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> Outcome:
        """PUT, as one operation: ``request("PUT", url, ...)``, with the options of
        `post`. The policy's `methods` must include PUT (else a ValueError, before
        anything is sent)."""
        return self._verb(
            "PUT",
            url,
            key,
            operation_id,
            identity,
            reference,
            hooks,
            content,
            data,
            files,
            json,
            params,
            headers,
            cookies,
            auth,
            follow_redirects,
            timeout,
            extensions,
        )

    def delete(
        self,
        url: httpx.URL | str,
        *,
        key: str | None = None,
        operation_id: str | None = None,
        identity: str | Sequence[str] | None = None,
        reference: str | None = None,
        hooks: Hooks | None = None,
        content: RequestContent | None = None,
        data: RequestData | None = None,
        files: RequestFiles | None = None,
        json: Any | None = None,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> Outcome:
        """DELETE, as one operation: ``request("DELETE", url, ...)``, with the options
        of `post`. The policy's `methods` must include DELETE (else a ValueError,
        before anything is sent)."""
        return self._verb(
            "DELETE",
            url,
            key,
            operation_id,
            identity,
            reference,
            hooks,
            content,
            data,
            files,
            json,
            params,
            headers,
            cookies,
            auth,
            follow_redirects,
            timeout,
            extensions,
        )

    def _verb(
        self,
        method: str,
        url: httpx.URL | str,
        key: str | None,
        operation_id: str | None,
        identity: str | Sequence[str] | None,
        reference: str | None,
        hooks: Hooks | None,
        content: RequestContent | None,
        data: RequestData | None,
        files: RequestFiles | None,
        json: Any | None,
        params: QueryParamTypes | None,
        headers: HeaderTypes | None,
        cookies: CookieTypes | None,
        auth: AuthTypes | UseClientDefault | None,
        follow_redirects: bool | UseClientDefault,
        timeout: TimeoutTypes | UseClientDefault,
        extensions: RequestExtensions | None,
    ) -> Outcome:
        # `post`, `put`, `patch` and `delete` go through `request`. This class's own, as
        # defined here, is run at once; any other (a subclass's, or one patched on the
        # class or the instance) is called with only the options the caller gave, for it
        # to read as **kwargs.
        if getattr(self.request, "__func__", None) is _OWN_REQUEST:
            return _client_request.request(
                self.settings,
                self.http,
                method,
                url,
                key,
                operation_id,
                identity,
                reference,
                hooks,
                content,
                data,
                files,
                json,
                params,
                headers,
                cookies,
                auth,
                follow_redirects,
                timeout,
                extensions,
            )
        return self.request(
            method,
            url,
            **given(
                {
                    "key": key,
                    "operation_id": operation_id,
                    "identity": identity,
                    "reference": reference,
                    "hooks": hooks,
                    "content": content,
                    "data": data,
                    "files": files,
                    "json": json,
                    "params": params,
                    "headers": headers,
                    "cookies": cookies,
                    "auth": auth,
                    "follow_redirects": follow_redirects,
                    "timeout": timeout,
                    "extensions": extensions,
                }
            ),
        )

    def get(
        self,
        url: httpx.URL | str,
        *,
        params: QueryParamTypes | None = None,
        headers: HeaderTypes | None = None,
        cookies: CookieTypes | None = None,
        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,
        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        extensions: RequestExtensions | None = None,
    ) -> httpx.Response:
        """A plain GET (safe; no key, no store), as httpx's ``get``."""
        return self.http.get(
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
        )

    def operation(self, operation_id: str) -> Outcome | None:
        """What the store knows of an operation (its `Outcome`, or None), without any
        network call."""
        return run(_client_request.stored(self.settings, operation_id), self.http)

    def resume(self, *, limit: int | None = None, origin: str | None = None) -> list[Outcome]:
        """Finish every unfinished operation in the store (see `idemclient.resume`);
        `origin` moves them there first."""
        return run(resumed(self.http, limit, origin), self.http)

    def reconcile(
        self,
        operation_id: str,
        *,
        lookup: str | None = None,
        statuses: Mapping[str, State] | None = None,
        status_field: str | None = None,
        reliable_404: bool = False,
        found: Callable[[httpx.Response], bool] | None = None,
    ) -> Outcome:
        """Settle an unfinished operation by looking it up on the server, never re-sending.

        `lookup` is a URL template with `{reference}` or `{key}`, for example
        ``"/v1/payments?reference={reference}"``: prefer the end-to-end reference, which
        the server keeps after it has forgotten keys. The answer is judged by the
        payment's status (`status_field`), through `statuses` (default
        `succeeded`/`completed` -> succeeded, `failed`/`declined` -> failed):

        - one payment with a final status: the operation is `succeeded` or `failed`,
          with the look-up's answer as its response;
        - an empty list: it was never applied, and becomes `not_sent`, safe to send
          again with its key; unless an attempt of it that may have been applied was
          sent less than the profile's `in_flight_for` ago (the server may still be
          running it): then `Indeterminate`, unsettled, with `not_before` saying when
          a look-up's "none" will count. An operation that keeps an answer read as a
          replay that no attempt of ours explained (django-idempotency-key's 409 to a
          caller's key) is `failed` instead, with that answer as its
          response: the application's refusal, never sent again; only for a look-up
          by `{reference}` alone (one by `{key}` finds nothing once the server has
          forgotten the key);
        - a payment whose status is not final (pending, processing...), several
          payments, a 404 (unless `reliable_404`: your API answers 404 for "no such
          payment"), any other answer or none: raises `Indeterminate` and the
          operation stays unsettled (and "maybe applied" once the server holds it).

        `found` (deprecated): your own judge; True counts as found and succeeded.

        Without `lookup`, the server profile's look-up is used (its template, status
        field and final statuses), if it has one; else a ValueError asks for one. An
        operation sent under another profile raises ValueError, nothing looked up: its
        server's `in_flight_for` is that profile's.
        """
        _client_reconcile.warn_if_found(found)
        step = _client_reconcile.reconcile(
            self.settings,
            self.http,
            operation_id,
            lookup=lookup,
            statuses=statuses,
            status_field=status_field,
            reliable_404=reliable_404,
            found=found,
        )
        return run(step, self.http)

    def close(self) -> None:
        """Close the httpx client, and the store if the client opened it."""
        self.http.close()
        self._close_store()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: `Client.request` as defined here: a verb runs it at once (see `_verb`).
_OWN_REQUEST = Client.request

# A call that misses an argument names what the caller called: "Client() missing 1
# required keyword-only argument: 'store'", not "Client.__init__()".
Client.__init__.__qualname__ = "Client"
