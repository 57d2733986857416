"""What `Client` and `AsyncClient` share: their settings and their httpx client, built
and closed; and the types of the request options they take from httpx. What their
`request` runs is `_client_request`'s (`request`, and its twin `arequest`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, cast

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

from ._deferred import opened
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
            if http is not None and not isinstance(http, cast(type, factory)):
                # A sync client under an async one (or the other way) fails only at the
                # first call, deep inside httpx: said here, naming both.
                raise TypeError(
                    f"http= must be an {factory.__module__}.{factory.__qualname__} for"
                    f" {type(self).__name__}, not {type(http).__module__}."
                    f"{type(http).__qualname__}"
                )
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
