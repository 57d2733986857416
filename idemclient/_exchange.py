"""One `send()` of a wrapped httpx client, and which request in it is the operation.

httpx sends more than the caller's request inside one `send()`: its redirect handling
sends the request on to a `Location`, and an auth flow may fetch a token from an auth
server and then send the request again with new credentials. All of these reach the
transport one at a time, as separate requests. This module tells the transport what
each one is (`route`):

- the caller's request, or one with the same method, origin and path (an auth flow
  may rebuild it): the operation, new or found again;
- a request carrying a `Continuation` (a redirect's next hop, or an auth flow sending
  the operation again after a 401): the same operation, with the same key, deadline and
  record. A hop to another origin is refused before anything is sent there, so neither
  the key nor the credentials go there; a hop that httpx turned into a GET (301, 302,
  303) is not the operation, only what may settle it;
- anything else inside the exchange (a token request, say): not an operation. It is
  sent as it is and never stored.

The exchange is known only to the transports of the client that began it: `wrap()`
installs a `send` on the client that opens one for each call (`install`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from ._call import CONTINUATION, Continuation
from ._errors import IdemError
from ._intent import KEY_HEADER
from ._outcome import OUTCOME
from ._reissue import aas_recorded, as_recorded, may_read_body
from ._settings import CALL_OPTIONS, Settings, origin_of
from ._telling import unsettled_error

__all__ = ["Exchange", "Route", "current", "finish_exchange", "install", "route"]


@dataclass(slots=True)
class Exchange:
    """One `send()`: the caller's request, and the operation it became, if any."""

    #: the `Settings` of the client whose `send` this is (an object compared by identity)
    owner: object
    request: httpx.Request
    continuation: Continuation | None = None
    #: the operation's key and body, once the transport has started it
    key: str | None = None
    body: bytes | None = None
    #: the header the key goes in (None: in the body) and whether it is quoted
    key_header: tuple[str | None, bool] = (KEY_HEADER, False)
    #: something of the caller's between `send()` and the transport (an auth flow, a
    #: request hook) may read the body: an operation issued again had its recorded
    #: bytes put in before (`_reissue.as_recorded`), and is never given other ones after
    body_read_above: bool = False

    def is_operation(self, request: httpx.Request) -> bool:
        """The caller's request, or one an auth flow rebuilt from it: the same method,
        and the same origin and path (a signing flow may change the query) or the same
        body (a flow may route it to a regional host). Sending the operation without
        its key would be the one unsafe mistake, so the doubt goes to the operation; a
        token request differs in both."""
        original = self.request
        if request is original:
            return True
        if request.method != original.method:
            return False
        if _target(request.url) == _target(original.url):
            return True
        body = self.body if self.body is not None else _content(original)
        return body is not None and _content(request) == body

    def adopt(self, request: httpx.Request) -> None:
        """Give a request an auth flow rebuilt what the caller's carried: its options
        (the operation id, the reference) and its key."""
        options = self.request.extensions.get(CALL_OPTIONS)
        if options is not None and CALL_OPTIONS not in request.extensions:
            request.extensions[CALL_OPTIONS] = options
        header, quoted = self.key_header
        if header is None:
            return  # the key is in the body, which a rebuilt request carries as it was
        key = self.key
        if key is not None and header not in request.headers:
            request.headers[header] = f'"{key}"' if quoted else key
        elif key is None and header in self.request.headers and header not in request.headers:
            request.headers[header] = self.request.headers[header]


def _content(request: httpx.Request) -> bytes | None:
    try:
        return request.content
    except httpx.RequestNotRead:
        return None


def _target(url: httpx.URL) -> tuple[bytes, bytes, int | None, bytes]:
    return (url.raw_scheme, url.raw_host, url.port, url.raw_path.partition(b"?")[0])


_CURRENT: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar(
    "idemclient.exchange", default=None
)

Action = Literal["operation", "continue", "follow", "refuse", "pass"]


@dataclass(frozen=True, slots=True)
class Route:
    """What the transport does with one request."""

    action: Action
    continuation: Continuation | None = None


_OPERATION = Route("operation")
_PASS = Route("pass")


def current(owner: object) -> Exchange | None:
    exchange = _CURRENT.get()
    return exchange if exchange is not None and exchange.owner is owner else None


def route(owner: object, request: httpx.Request, keyed: Callable[[httpx.Request], bool]) -> Route:
    """What `request` is, for the transports of the client whose settings are `owner`."""
    exchange = current(owner)
    continuation = request.extensions.get(CONTINUATION)
    if not isinstance(continuation, Continuation):
        continuation = None
        if (
            exchange is not None
            and exchange.continuation is not None
            and not exchange.continuation.redirected
            and exchange.is_operation(request)
        ):
            # An auth flow sending the operation again as a request of its own making.
            continuation = exchange.continuation
    if continuation is not None:
        if continuation.redirected:
            if origin_of(request.url) != continuation.origin:
                return Route("refuse", continuation)
            if request.method != continuation.method:
                return Route("follow", continuation)
        return Route("continue", continuation)
    if exchange is not None and request is not exchange.request:
        if not exchange.is_operation(request):
            return _PASS  # the auth flow's own request (a token, say): not an operation
        exchange.adopt(request)
    # The caller's request, its method and URL as the exchange began: found again in
    # the settings' frames (`Settings.frame`), not worked out again.
    return _OPERATION if keyed(request) else _PASS


def handed_back(owner: object, continuation: Continuation) -> bool:
    """Note an operation handed back to httpx; False when no exchange will tell its
    outcome at the end (the transport was used on its own), so the caller must."""
    exchange = current(owner)
    if exchange is None:
        return False
    exchange.continuation = continuation
    return True


def finish_exchange(exchange: Exchange, response: httpx.Response | None) -> Continuation | None:
    """At the end of a `send()`: the operation left handed back, whose outcome is now
    the exchange's, if any. Attaches it to `response` when that carries none (an auth
    flow that gave up, answering with its own request's response)."""
    exchange.request.extensions.pop(CONTINUATION, None)  # never continued by a re-send
    continuation = exchange.continuation
    if continuation is None:
        return None
    if response is not None and OUTCOME not in response.extensions:
        response.extensions[OUTCOME] = dataclasses.replace(
            continuation.outcome, response=None, last_status=continuation.status
        )
    return continuation


#: what `send()` takes for "the client's own auth"
_DEFAULT: Any = httpx.USE_CLIENT_DEFAULT

SendFn = Callable[..., httpx.Response]
AsyncSendFn = Callable[..., Awaitable[httpx.Response]]


def install(
    client: httpx.Client | httpx.AsyncClient,
    owner: object,
    tell: Callable[[Continuation], None],
) -> None:
    """Give `client` a `send` that opens an exchange for each call (its public `send`,
    which `request()`, `post()` and `stream()` all go through). `tell` tells the hooks
    about an operation left handed back when the call ends. Where an auth flow or a
    request hook may read the body, an operation issued again gets its recorded bytes
    here, before they run (`_reissue.as_recorded`)."""
    settings = owner if isinstance(owner, Settings) else None
    if isinstance(client, httpx.Client):
        original: SendFn = client.send

        @functools.wraps(original)
        def send(request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
            reads = False
            if settings is not None and may_read_body(client, kwargs.get("auth", _DEFAULT)):
                reads, request = True, as_recorded(settings, request)
            with _Exchanging(owner, request, tell, body_read_above=reads) as ended:
                ended.response = original(request, *args, **kwargs)
                return ended.response

        client.send = send  # type: ignore[method-assign]  # the instance's own send
    else:
        aoriginal: AsyncSendFn = client.send

        @functools.wraps(aoriginal)
        async def asend(request: httpx.Request, *args: Any, **kwargs: Any) -> httpx.Response:
            reads = False
            if settings is not None and may_read_body(client, kwargs.get("auth", _DEFAULT)):
                reads, request = True, await aas_recorded(settings, request)
            with _Exchanging(owner, request, tell, body_read_above=reads) as ended:
                ended.response = await aoriginal(request, *args, **kwargs)
                return ended.response

        client.send = asend  # type: ignore[method-assign]  # the instance's own send


class _Exchanging:
    """One send of a wrapped client, sync or async alike: the exchange is current
    while httpx works on the request, an error raised above the transport after a
    handoff says what it means for the operation, and the exchange ends either way.

    A class rather than a generator-based context manager: it is entered once per
    request, and that costs a third as much."""

    __slots__ = ("exchange", "response", "tell", "token")

    def __init__(
        self,
        owner: object,
        request: httpx.Request,
        tell: Callable[[Continuation], None],
        *,
        body_read_above: bool = False,
    ) -> None:
        exchange = Exchange(owner, request, body_read_above=body_read_above)
        if isinstance(owner, Settings):
            # Where the caller's request carries its key under the client's profile: an
            # auth flow that rebuilds the request before it is first sent must carry
            # that header over, not the generic one (or the caller's key= is lost for
            # a new one).
            slot = owner.resolve(request).key
            exchange.key_header = slot.header, slot.quoted
        self.exchange = exchange
        self.tell = tell
        #: the response httpx gave back, if it gave one
        self.response: httpx.Response | None = None

    def __enter__(self) -> _Exchanging:
        self.token = _CURRENT.set(self.exchange)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        try:
            if isinstance(error, Exception):
                unsettled = _unsettled(self.exchange, error)
                if unsettled is not error:
                    raise unsettled from error
        finally:
            _CURRENT.reset(self.token)
            _end(self.exchange, self.response, self.tell)


def _unsettled(exchange: Exchange, error: Exception) -> Exception:
    """What `error`, raised above the transport (by httpx's redirect handling, an auth
    flow, a read of a body), means for an operation handed back to httpx in the call:
    it ends there, unsettled, and says so as an idemclient error. Any other error
    stands as it is (raising it again keeps its traceback)."""
    continuation = exchange.continuation
    if continuation is None or isinstance(error, IdemError):
        return error
    return unsettled_error(
        continuation.outcome,
        f"after its HTTP {continuation.status} went back to httpx, the call failed:"
        f" {type(error).__name__}: {error}",
    )


def _end(
    exchange: Exchange, response: httpx.Response | None, tell: Callable[[Continuation], None]
) -> None:
    continuation = finish_exchange(exchange, response)
    if continuation is not None and not continuation.told:
        continuation.told = True
        tell(continuation)
