"""What the engine's steps ask to have done: one vocabulary of effects, and the two
drivers that run a step to its end (`drive` in the calling thread, `adrive` awaiting).

A step is a generator: it yields an effect and is sent back its result, or has what it
raised thrown in. The transports' flow (`_flow`) and the client's own steps
(`_operations`: an operation sent, a resume, the batch's phases) speak this one
vocabulary; what differs between the sync and the async world is only who does each
effect (`_transport` for a request's flow, `_operations` for a client's step).

A blocking call is typed: `blocking(store.finish, operation_id, owner=...)` is checked
by mypy against `store.finish`'s signature, and `yield from result(...)` gives back
what it returns, typed.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

import httpx

from ._frozen import fast_constructor

if TYPE_CHECKING:
    from ._clock import Clock

__all__ = [
    "Blocking",
    "Body",
    "Close",
    "Each",
    "Effect",
    "Feed",
    "Flow",
    "Http",
    "Pause",
    "Read",
    "Send",
    "Shield",
    "Sleep",
    "Turn",
    "adrive",
    "blocking",
    "drive",
    "result",
]

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Blocking(Generic[T]):
    """Call `fn` (the store, or anything else that blocks); async, in a worker thread,
    so that an fsync never blocks the event loop."""

    fn: Callable[..., T]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Blocking[T]:
    """`fn(*args, **kwargs)` as an effect, its arguments checked as a direct call's."""
    return _new_blocking(fn, args, kwargs)


#: `Blocking(...)` without a call per field (see `_frozen`): two per operation.
_new_blocking = fast_constructor(Blocking)


def result(effect: Blocking[T]) -> Generator[Blocking[T], Any, T]:
    """Ask for `effect` and give back its result, typed: `x = yield from result(...)`."""
    done: T = yield effect
    return done


@dataclass(frozen=True, slots=True)
class Send:
    """Send one attempt through the inner transport; the result is its response."""

    request: httpx.Request


@dataclass(frozen=True, slots=True)
class Read:
    """Read a response's body."""

    response: httpx.Response


@dataclass(frozen=True, slots=True)
class Close:
    """Close a response that will not be read (frees its connection)."""

    response: httpx.Response


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait `seconds` on `clock` (a request's flow: its client's clock when None)."""

    seconds: float
    clock: Clock | None = None


def Pause(clock: Clock, seconds: float) -> Sleep:
    """`Sleep` on `clock` (the name the client's steps used)."""
    return Sleep(seconds, clock)


@dataclass(frozen=True, slots=True)
class Turn:
    """Take `lock` (one origin's turn to be asked its time), waiting at most `limit`
    seconds of real time (not the client's clock, which other waiters' sleeps would
    move); the result says whether it was taken. Released by the flow."""

    lock: threading.Lock
    limit: float


@dataclass(frozen=True, slots=True)
class Body:
    """Read a request's streamed body, at most `limit` bytes, so that every attempt can
    send it again; the result is the body."""

    request: httpx.Request
    limit: int


@dataclass(frozen=True, slots=True)
class Shield:
    """Do `effect` even while being cancelled: the last record of an interrupted call."""

    effect: Blocking[Any]


@dataclass(frozen=True, slots=True)
class Http:
    """Call the httpx client's method `name` (`send`, `request`, `get`): awaited in async."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class Feed(Protocol):
    """Jobs made a chunk at a time, when the last is taken: a million rows are never
    all in memory. `next_chunk` may block (it reads the store): async, it is called in
    a worker thread."""

    def next_chunk(self) -> list[Any]:
        """The next jobs; an empty list when there are no more."""
        ...


@dataclass(frozen=True, slots=True)
class Each:
    """Run the step `work(job)` for every job, `count` at a time (threads, or tasks),
    until done, or `stop` is set, or `also_stop()` is true; the first error is raised.
    `jobs`: a sequence, or a `Feed` that makes them a chunk at a time."""

    jobs: Sequence[Any] | Feed
    work: Callable[[Any], Generator[Effect, Any, None]]
    count: int
    stop: threading.Event
    also_stop: Callable[[], bool] = lambda: False


Effect = Blocking[Any] | Send | Read | Close | Sleep | Shield | Body | Turn | Http | Each
#: A request's way through a transport: effects asked for, an answer returned (`_flow`).
Flow = Generator[Effect, Any, httpx.Response]


def drive(flow: Generator[Any, Any, Any], do: Callable[[Any], Any]) -> Any:
    """Do each effect `flow` asks for with `do`, in this thread, until it returns; what
    `do` raises is thrown into the flow, which decides. So is anything raised here
    between two effects (a Ctrl-C landing in this loop): the flow, not this loop, leaves
    the record that says where the operation stands."""
    # One loop, no helper per effect: it turns a few times for every request.
    send, throw = flow.send, flow.throw
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            while True:  # inside the handler: a Ctrl-C at its turn is thrown in too
                # Thrown in outside any handler, so that what the flow raises is not
                # chained to it unless the flow chains it.
                effect = send(answer) if error is None else throw(error)
                error = None
                answer = do(effect)
        except BaseException as exc:
            # Raised by `do`, or here between two effects: the flow (suspended) decides.
            if getattr(flow, "gi_frame", None) is not None:
                answer, error = None, exc
                continue
            if isinstance(exc, StopIteration):
                return exc.value
            raise  # the flow's own end


async def adrive(flow: Generator[Any, Any, Any], do: Callable[[Any], Awaitable[Any]]) -> Any:
    """`drive`, awaiting each effect."""
    send, throw = flow.send, flow.throw
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            while True:
                effect = send(answer) if error is None else throw(error)
                error = None
                answer = await do(effect)
        except BaseException as exc:
            if getattr(flow, "gi_frame", None) is not None:
                answer, error = None, exc
                continue
            if isinstance(exc, StopIteration):
                return exc.value
            raise
