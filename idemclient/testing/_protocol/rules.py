"""The protocol's decisions, as pure functions: no storage, no clock, no I/O.

Everything here takes values and returns values (or raises `Problem`, an answer in
waiting), so the rules of the protocol can be tested densely, one table row at a time:
which keys and tokens are acceptable, what a valid payment body is, what the request
hash covers, what an existing key row means for a new arrival, and which step of the
phase machine runs next.
"""

from __future__ import annotations

import collections
import enum
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from .messages import ServerResponse, json_bytes
from .storable import unstorable_in_body, unstorable_in_target

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_TOKEN_LENGTH",
    "PROBLEM_CONTENT_TYPE",
    "RECOVERY_POINTS",
    "Payment",
    "Phase",
    "Problem",
    "Step",
    "Verdict",
    "check_storable",
    "check_target",
    "downstream_key",
    "judge_existing",
    "next_step",
    "parse_bearer",
    "parse_idempotency_key",
    "parse_payment",
    "render_retry_after",
    "request_hash",
]

MAX_KEY_LENGTH = 255
_KEY_CHARS = re.compile(r"[A-Za-z0-9\-_.:~]+")
# RFC 6750 token68, the only shape a bearer token may take on the wire.
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: The token names the client, and the client is part of PostgreSQL index entries
#: (with a key, or with a reference of up to 1,020 bytes), which cannot exceed 2,704
#: bytes: a longer token would be refused there after admission, and kept on SQLite.
MAX_TOKEN_LENGTH = 1024
#: A payment instruction is small; anything bigger is a client bug or an attack.
MAX_BODY_BYTES = 64 * 1024
MAX_REFERENCE_LENGTH = 255
# Amounts are integers in minor units; stay inside what every JSON parser reads exactly.
MAX_AMOUNT = 2**53 - 1
_CURRENCY = re.compile(r"[A-Za-z]{3}")
#: Names the server sets on a resource; a body may not supply them.
RESERVED_FIELDS = frozenset({"id", "object", "status", "created", "idempotency_key", "external"})

PROBLEM_CONTENT_TYPE = "application/problem+json"
JSON_CONTENT_TYPE = "application/json"


class Phase(enum.StrEnum):
    """Points in the life of one request, in order.

    The ones in `RECOVERY_POINTS` are written to the key row's `recovery_point`; the
    others exist only as places where a crash can be injected.
    """

    #: the key row exists, no phase has committed
    ADMITTED = "ADMITTED"
    #: Handler1 committed: the resource exists
    H1_DONE = "H1_DONE"
    #: intent to call external system 1 committed, the call may be out there
    EXT1_SENT = "EXT1_SENT"
    #: external system 1 answered, its outcome is not yet recorded
    EXT1_CALLED = "EXT1_CALLED"
    #: the outcome of external system 1 is recorded
    EXT1_DONE = "EXT1_DONE"
    #: Handler2 committed
    H2_DONE = "H2_DONE"
    EXT2_SENT = "EXT2_SENT"
    EXT2_CALLED = "EXT2_CALLED"
    EXT2_DONE = "EXT2_DONE"
    #: Handler3 committed: response stored, state finished, lease cleared
    FINISHED = "FINISHED"


RECOVERY_POINTS = (
    Phase.H1_DONE,
    Phase.EXT1_SENT,
    Phase.EXT1_DONE,
    Phase.H2_DONE,
    Phase.EXT2_SENT,
    Phase.EXT2_DONE,
)


class Problem(Exception):
    """An RFC 9457 problem: raised by a decision, rendered by the core.

    A plain exception rather than a frozen dataclass: tools (hypothesis, pytest) attach
    notes and tracebacks to exceptions they see, which a frozen instance would refuse.
    """

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.extra: Mapping[str, Any] = extra or {}
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {
            **self.extra,
            "type": f"urn:idemclient:problem:{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }

    def response(self) -> ServerResponse:
        headers = (("content-type", PROBLEM_CONTENT_TYPE), *self.headers)
        return ServerResponse(self.status, headers, json_bytes(self.body()))


def _bad_key(detail: str) -> Problem:
    return Problem(400, "invalid-idempotency-key", "Invalid Idempotency-Key", detail)


def parse_idempotency_key(values: Sequence[str]) -> str:
    """The key from the `Idempotency-Key` header values, or a 400 `Problem`.

    Accepts the bare form (`abc`) and the structured-field string form (`"abc"`,
    RFC 8941). Either way the key itself is 1 to 255 characters of
    `A-Z a-z 0-9 - _ . : ~`: it becomes part of a database key, so nothing else passes.
    """
    if not values:
        raise _bad_key("the Idempotency-Key header is required on this request")
    if len(values) > 1:
        raise _bad_key("send exactly one Idempotency-Key header")
    raw = values[0].strip(" \t")
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        # An sf-string may carry \" and \\ escapes, but neither character is allowed
        # in a key, so the quoted form is valid exactly when its inside is.
        raw = raw[1:-1]
    if not raw:
        raise _bad_key("the Idempotency-Key is empty")
    if len(raw) > MAX_KEY_LENGTH:
        raise _bad_key(f"the Idempotency-Key is longer than {MAX_KEY_LENGTH} characters")
    if _KEY_CHARS.fullmatch(raw) is None:
        raise _bad_key("the Idempotency-Key may contain only A-Z a-z 0-9 - _ . : ~")
    return raw


def parse_bearer(values: Sequence[str]) -> str:
    """The client (tenant) named by `Authorization: Bearer <token>`, or a 401 `Problem`."""
    challenge = (("www-authenticate", 'Bearer realm="idemclient-reference"'),)
    if len(values) != 1:
        raise Problem(
            401,
            "unauthenticated",
            "Authentication required",
            "send exactly one Authorization: Bearer <token> header",
            headers=challenge,
        )
    scheme, _, token = values[0].strip(" \t").partition(" ")
    token = token.strip(" \t")
    if scheme.lower() != "bearer" or _TOKEN68.fullmatch(token) is None:
        raise Problem(
            401,
            "unauthenticated",
            "Authentication required",
            "the Authorization header must be: Bearer <token>",
            headers=challenge,
        )
    if len(token) > MAX_TOKEN_LENGTH:
        raise Problem(
            401,
            "unauthenticated",
            "Authentication required",
            f"the bearer token is longer than {MAX_TOKEN_LENGTH} characters",
            headers=challenge,
        )
    return token


@dataclass(frozen=True, slots=True)
class Payment:
    """A valid payment or payout instruction. `extra` holds every other body field."""

    amount: int
    currency: str
    reference: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def _bad_body(detail: str, *, field: str | None = None) -> Problem:
    extra = {} if field is None else {"field": field}
    return Problem(400, "invalid-request-body", "Invalid request body", detail, extra=extra)


def check_storable(value: Any, raw: bytes) -> None:
    """A 400 `Problem` naming the field when the parsed body `value` holds what not
    every storage backend keeps alike (see `storable`); `raw` is the body as received."""
    found = unstorable_in_body(value, raw)
    if found is not None:
        field, what = found
        raise _bad_body(f"{field} {what}", field=field)


def check_target(path: str, query: str) -> None:
    """A 400 `Problem` when the path or the query holds a NUL (or a lone surrogate):
    text no storage backend looks up alike."""
    found = unstorable_in_target(path, query)
    if found is not None:
        where, what = found
        raise Problem(400, "invalid-request", "Invalid request", f"the {where} holds {what}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON but no finite float: stored, it would be echoed back as
    # "Infinity", which is not JSON at all.
    value = float(text)
    if not math.isfinite(value):
        raise _bad_body(f"the number {text[:40]} is out of range")
    return value


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # {"amount": 1, "amount": 100}: parsers disagree on which one counts (first, last,
    # or an error), so a proxy and this server could read different amounts. A payment
    # instruction must mean one thing: refuse it.
    value = dict(pairs)
    if len(value) != len(pairs):
        counts = collections.Counter(name for name, _ in pairs)
        twice = next(name for name, count in counts.items() if count > 1)
        raise _bad_body(f"the field name {twice[:40]!r} appears more than once in one object")
    return value


# Built once: `json.loads` with hooks would build a new decoder (and its scanner) for
# every body.
_PAYMENT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    object_pairs_hook=_unique_names,
)


def parse_payment(body: bytes) -> tuple[Payment, bytes]:
    """The instruction in `body` and its canonical bytes, or a 400/413 `Problem`.

    The canonical form (compact, keys sorted) is what gets hashed and stored, so two
    serialisations of the same object are the same request.
    """
    if len(body) > MAX_BODY_BYTES:
        raise Problem(
            413,
            "body-too-large",
            "Request body too large",
            f"a payment body is at most {MAX_BODY_BYTES} bytes",
        )
    try:
        value = _PAYMENT_DECODER.decode(body.decode("utf-8"))
    except Problem:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad_body("the body must be a UTF-8 JSON object") from None
    if not isinstance(value, dict):
        raise _bad_body("the body must be a JSON object")
    # Before any field is read: what is accepted here must be stored, and read back,
    # alike by every backend and at any depth of the stack.
    check_storable(value, body)
    amount = value.get("amount")
    # bool is an int in Python; true is not an amount.
    if type(amount) is not int or not 0 < amount <= MAX_AMOUNT:
        raise _bad_body(f"amount must be an integer from 1 to {MAX_AMOUNT}, in minor units")
    currency = value.get("currency")
    if not isinstance(currency, str) or _CURRENCY.fullmatch(currency) is None:
        raise _bad_body("currency must be a three-letter ISO 4217 code")
    reference = value.get("reference")
    if not isinstance(reference, str) or not 0 < len(reference) <= MAX_REFERENCE_LENGTH:
        raise _bad_body(
            f"reference must be a non-empty string of at most {MAX_REFERENCE_LENGTH} characters"
        )
    reserved = sorted(RESERVED_FIELDS.intersection(value))
    if reserved:
        raise _bad_body(f"these fields are set by the server: {', '.join(reserved)}")
    extra = {k: v for k, v in value.items() if k not in ("amount", "currency", "reference")}
    return Payment(amount, currency, reference, extra), json_bytes(value)


def request_hash(method: str, path: str, canonical_body: bytes) -> bytes:
    """What identifies a request for key reuse: method, path and body.

    The path is in it so a key reused on another endpoint is a conflict too.
    """
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode()):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    digest.update(canonical_body)
    return digest.digest()


def downstream_key(client: str, key: str, step: str) -> str:
    """The deterministic key for one downstream step: hash(key + step), per client.

    The seed writes K1 = hash(key + "ext1"). Keys are unique per client only, and the
    external systems are shared, so the client is hashed in too: otherwise two tenants
    who both send `req-001` would present the same K1 and the second payment would be
    taken for a replay of the first. Length prefixes keep the parts unambiguous.
    """
    digest = hashlib.sha256()
    for part in (client, key, step):
        encoded = part.encode()
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return digest.hexdigest()[:40]


class Verdict(enum.Enum):
    """What an existing key row means for a request that presents the same key."""

    #: finished: answer with the stored response, byte for byte
    REPLAY = "replay"
    #: the stored request differs: the client reused the key, answer 422
    MISMATCH = "mismatch"
    #: started and the lease is fresh: someone is working on it, answer 409
    IN_FLIGHT = "in_flight"
    #: started and the lease is stale or released: try to take the request over
    TAKE_OVER = "take_over"


def judge_existing(
    *,
    stored_hash: bytes,
    state: str,
    locked_at: float | None,
    request_hash: bytes,
    now: float,
    lease: float,
) -> Verdict:
    """Decide what to do with a key that already exists. Pure.

    The hash comes first: a different request under a used key is a client bug whatever
    state the row is in, and answering anything else could leak or apply the wrong
    payment. A released lease (`locked_at` NULL) is stale by definition: releasing is
    how an attempt invites the next actor to take over at once.
    """
    if stored_hash != request_hash:
        return Verdict.MISMATCH
    if state == "finished":
        return Verdict.REPLAY
    if locked_at is not None and locked_at >= now - lease:
        return Verdict.IN_FLIGHT
    return Verdict.TAKE_OVER


class Step(enum.Enum):
    """The unit of work the phase machine runs next."""

    HANDLER1 = "handler1"
    SEND_EXT1 = "send_ext1"
    CALL_EXT1 = "call_ext1"
    HANDLER2 = "handler2"
    SEND_EXT2 = "send_ext2"
    CALL_EXT2 = "call_ext2"
    HANDLER3 = "handler3"


_NEXT = {
    None: Step.HANDLER1,
    Phase.H1_DONE: Step.SEND_EXT1,
    Phase.EXT1_SENT: Step.CALL_EXT1,
    Phase.EXT1_DONE: Step.HANDLER2,
    Phase.H2_DONE: Step.SEND_EXT2,
    Phase.EXT2_SENT: Step.CALL_EXT2,
    Phase.EXT2_DONE: Step.HANDLER3,
}


def next_step(recovery_point: str | None, *, declined: bool = False) -> Step:
    """The step that follows `recovery_point`. Pure.

    A payment declined by external system 1 skips external system 2: there is nothing
    to settle, and Handler3 records the decline as the final answer.
    """
    try:
        point = None if recovery_point is None else Phase(recovery_point)
        step = _NEXT[point]
    except (ValueError, KeyError):
        raise ValueError(f"{recovery_point!r} is not a recovery point") from None
    return Step.HANDLER3 if point is Phase.H2_DONE and declined else step


def render_retry_after(value: float | str | datetime) -> str:
    """A `Retry-After` value: delta-seconds, an HTTP-date, or a raw string sent verbatim.

    Whole seconds render as delta-seconds. A fractional or negative number is sent as
    written, on purpose: clients must survive such values, so the sandbox can send them.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("an HTTP-date needs an aware datetime (for example UTC)")
        return format_datetime(value.astimezone(UTC), usegmt=True)
    if isinstance(value, str):
        return value
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return repr(float(value))
