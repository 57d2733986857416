"""`AsyncClient`: the async `Client` (asyncio or trio, through httpx).

The twin of `Client` (`_client`): `request` and its verbs await `_client_request`'s
`arequest`, the twin of what `Client`'s run; the other methods await the step that
`Client`'s runs (`_operations.arun`). Every store call runs in a worker thread. A test
holds the two classes' signatures the same.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import httpx

from . import _client_reconcile, _client_request
from ._behind import written
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
from ._deferred import opened
from ._hooks import Hooks
from ._operations import arun
from ._outcome import Outcome, State, from_record
from ._policy import RetryPolicy
from ._profile import Profile
from ._resume import resumed
from ._transport import DEFAULT_MAX_REQUEST_BODY, make_settings
from ._worker import AT_EXIT, flush_all, to_thread
from ._wrap import StoreArg, start_store

__all__ = ["AsyncClient"]


class AsyncClient(ClientBase[httpx.AsyncClient]):
    """The async `Client` (asyncio or trio, through httpx): every method is the same
    with `await`; what the store knows of an operation is `aoperation`.

    Nothing is opened when it is built, on the event loop or before there is one: the
    store is opened (and its old bodies reaped) in a worker thread when the client is
    entered (`async with`), or else at its first use; every store call runs in a worker
    thread, so the event loop is never blocked by the store.
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
        http: httpx.AsyncClient | None = None,
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
            deferred=True,
            start=start_store,
            server_clock=server_clock,
            profile_by_host=profile_by_host,
            time_probe=time_probe,
        )
        super().__init__(settings, http, httpx.AsyncClient, httpx_options)

    async def request(
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
          `httpx.AsyncClient.request` takes them.

        Returns the `Outcome` for a final answer (state `succeeded` or `failed`).
        Raises `NotSent`, `Indeterminate` (maybe applied) or `KeyConflict`.
        """
        return await _client_request.arequest(
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

    async def post(
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
        return await self._verb(
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

    async def patch(
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
        return await self._verb(
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

    async def put(
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
        return await self._verb(
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

    async def delete(
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
        return await self._verb(
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

    async def _verb(
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
            return await _client_request.arequest(
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
        return await self.request(
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

    async def get(
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
        return await self.http.get(
            url,
            params=params,
            headers=headers,
            cookies=cookies,
            auth=auth,
            follow_redirects=follow_redirects,
            timeout=timeout,
            extensions=extensions,
        )

    async def aoperation(self, operation_id: str) -> Outcome | None:
        """What the store knows of an operation (its `Outcome`, or None), without any
        network call; the store is read in a worker thread, once the answers' writes
        queued so far have run (those another event loop queued too: a client used in
        one `asyncio.run` and read in the next reads what its caller was told)."""
        await written()
        return await arun(_client_request.stored(self.settings, operation_id), self.http)

    def operation(self, operation_id: str) -> Outcome | None:
        """Deprecated: reads the store in the calling thread, which in async code is the
        event loop's. Use ``await client.aoperation(operation_id)``."""
        warnings.warn(
            "AsyncClient.operation() reads the store on the event loop; use"
            " `await client.aoperation(operation_id)`",
            DeprecationWarning,
            stacklevel=2,
        )
        # What was queued (an answer's write, by this loop or another) is read, as
        # `aoperation` reads it.
        flush_all(AT_EXIT)
        record = opened(self.settings.store).get(operation_id)
        return None if record is None else from_record(record)

    async def resume(self, *, limit: int | None = None, origin: str | None = None) -> list[Outcome]:
        """Finish every unfinished operation in the store (see `idemclient.aresume`);
        `origin` moves them there first."""
        return await arun(resumed(self.http, limit, origin), self.http)

    async def reconcile(
        self,
        operation_id: str,
        *,
        lookup: str | None = None,
        statuses: Mapping[str, State] | None = None,
        status_field: str | None = None,
        reliable_404: bool = False,
        found: Callable[[httpx.Response], bool] | None = None,
    ) -> Outcome:
        """Settle an unfinished operation by looking it up on the server, never
        re-sending: `Client.reconcile`, awaited (the same options, the same verdicts),
        once the answers' writes queued so far (by any event loop) have run: an answer
        this client was told and is still writing is never taken for another caller's
        send in progress."""
        _client_reconcile.warn_if_found(found)
        await written()
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
        return await arun(step, self.http)

    async def aclose(self) -> None:
        """Close the httpx client, and the store if the client opened it (in a worker
        thread), once the answers' writes still queued have run."""
        try:
            await self.http.aclose()
        finally:
            await to_thread(self._close_store)

    async def __aenter__(self) -> AsyncClient:
        try:
            await to_thread(functools.partial(opened, self.settings.store))
        except BaseException:
            # `async with` will not call __aexit__: close what was built, as a
            # `Client` whose store cannot be opened does.
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


#: `AsyncClient.request` as defined here: a verb runs it at once (see `_verb`).
_OWN_REQUEST = AsyncClient.request

# A call that misses an argument names what the caller called: "AsyncClient() missing
# 1 required keyword-only argument: 'store'", not "AsyncClient.__init__()".
AsyncClient.__init__.__qualname__ = "AsyncClient"
