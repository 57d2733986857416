"""What `Client` and `AsyncClient` share: their settings and their httpx client, built
and closed; the step their `request` runs; and the types of the request options they
take from httpx."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

import httpx
from httpx._client import USE_CLIENT_DEFAULT, UseClientDefault
from httpx._types import (
    AuthTypes,
    CookieTypes,
    HeaderTypes,
    QueryParamTypes,
    RequestContent,
    RequestData,
    RequestExtensions,
    RequestFiles,
    TimeoutTypes,
)

from . import _client_request
from ._deferred import opened
from ._hooks import Hooks
from ._operations import Op
from ._outcome import Outcome
from ._policy import RetryPolicy
from ._settings import Settings
from ._store import OperationStore
from ._wrap import HttpxClient, wrap_with

__all__ = [
    "USE_CLIENT_DEFAULT",
    "AuthTypes",
    "ClientBase",
    "CookieTypes",
    "HeaderTypes",
    "QueryParamTypes",
    "RequestContent",
    "RequestData",
    "RequestExtensions",
    "RequestFiles",
    "TimeoutTypes",
    "UseClientDefault",
    "given",
]


class ClientBase(Generic[HttpxClient]):
    """The state of a client: its `settings` (the store, policy, profile, clock...)
    and `http`, the wrapped httpx client that sends its requests."""

    settings: Settings
    http: HttpxClient

    def __init__(
        self,
        settings: Settings,
        http: HttpxClient | None,
        factory: Callable[..., HttpxClient],
        httpx_options: dict[str, Any],
    ) -> None:
        """Keep `settings` and the httpx client (given, or built from
        `httpx_options`), wrapped with them. On any failure the store just opened is
        closed again."""
        self.settings = settings
        try:
            if http is not None and httpx_options:
                raise TypeError("pass either http= or httpx options, not both")
            client = http if http is not None else factory(**httpx_options)
            wrap_with(client, settings)
        except BaseException:
            self._close_store()
            raise
        self.http = client

    @property
    def store(self) -> OperationStore:
        """The store, as given or as opened from the path or URL given. An `AsyncClient`
        opens it here, in the calling thread, if it has not yet (its own calls open it in
        a worker thread)."""
        return opened(self.settings.store)

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy: which methods are operations, how many attempts, how long."""
        return self.settings.policy

    def _operation(
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
    ) -> Op[Outcome]:
        """The step of `request` (see `_client_request`), for either client to run."""
        return _client_request.request(
            self.settings,
            self.http,
            method,
            url,
            key=key,
            operation_id=operation_id,
            identity=identity,
            reference=reference,
            hooks=hooks,
            headers=headers,
            extensions=extensions,
            options={
                "content": content,
                "data": data,
                "files": files,
                "json": json,
                "params": params,
                "cookies": cookies,
                "auth": auth,
                "follow_redirects": follow_redirects,
                "timeout": timeout,
            },
        )

    def _close_store(self) -> None:
        # Closing the http client closed it already through its transports; a store
        # passed in as an object stays open: it is the caller's.
        if self.settings.owns_store:
            self.settings.store.close()


def given(options: dict[str, Any]) -> dict[str, Any]:
    """The options of a verb's call that were given, not left at their defaults: what
    `post` passes on to `request`, so that a subclass's `request` that reads
    ``**kwargs`` (``kwargs.setdefault("identity", ...)``) sees only what its caller
    passed. ``auth=None`` is given (no auth), not a default."""
    return {
        name: value
        for name, value in options.items()
        if value is not USE_CLIENT_DEFAULT and (value is not None or name == "auth")
    }
