"""What one attempt's result means: the attempt classification table, as code.

| observed                                      | kind            | retry | maybe applied | final |
|-----------------------------------------------|-----------------|-------|---------------|-------|
| 2xx except 202                                | SUCCEEDED       | no    | yes           | yes   |
| the profile's "declined" in a 2xx's body      | REJECTED        | no    | no            | yes   |
| 202 Accepted                                  | ACCEPTED        | yes   | yes           | no    |
| 3xx                                           | REDIRECT        | no    | yes           | no    |
| 409 Conflict                                  | IN_PROGRESS     | yes   | yes           | no    |
| 429, 503                                      | THROTTLED       | yes   | no            | no    |
| 500, 502, 504                                 | SERVER_ERROR    | yes   | yes           | no    |
| any other 5xx (501, 520, 524...)              | SERVER_ERROR    | no    | yes           | no    |
| 422                                           | KEY_CONFLICT    | no    | no            | yes   |
| the profile's "already done, here it is"      | EXISTING        | no    | yes           | no    |
| the profile's replay given another status     | REPLAYED        | no    | yes           | yes   |
| the profile's "sign this first"               | CHALLENGED      | no    | no            | no    |
| 401, 407                                      | UNAUTHENTICATED | no    | no            | no    |
| any other 4xx                                 | REJECTED        | no    | no            | yes   |
| any other status (1xx, 6xx...)                | UNKNOWN         | no    | yes           | no    |
| connect error or timeout, pool timeout, proxy | NOT_SENT        | yes   | no            | no    |
| TLS verification failure, bad URL scheme,     |                 |       |               |       |
|   request httpx could not write at all        | UNSENDABLE      | no    | no            | no    |
| write/read error or timeout, peer dropped     | MAYBE_APPLIED   | yes   | yes           | no    |
| anything else raised by the transport         | UNKNOWN         | no    | yes           | no    |

That table is the generic profile's. A server profile (`_profile.Profile`) gives some
answers meanings of their own, by status, header and the error codes in the body:
"still running" (IN_PROGRESS), "same key, other request" (KEY_CONFLICT), "already done,
here is the resource" (EXISTING), a replay of the stored success under another status
(REPLAYED), "sign this first" (CHALLENGED). A status the profile claims for one of
those that matches none of them is an ordinary refusal there (a GoCardless 409 that is
not its creation conflict), not the generic row.

Only a 2xx is a success and only a 4xx is a refusal (or a 2xx whose body says the
payment was declined, where the profile's provider declines so): those are *final*, stored as the
operation's answer. "Already done, here it is" is neither: it names a resource made
under the key, which may have been declined, or still be running; what it came to is
read from the resource (`Client` fetches it), never from the name alone. Everything
else that ends a call without a retry leaves the operation unsettled: `indeterminate`
if any attempt may have been applied, else `not_sent`. A 5xx is server or proxy
trouble, not an answer about the payment, whether or not it is retried.

Two kinds go back to httpx instead of ending the call (`handoff`): 401 and 407 are about
the credentials, refused before any processing, and an auth flow may send the request
again with new ones; a 3xx is for httpx's redirect handling to follow or not. Either
way the operation continues under the same key if httpx sends it on.

A status in the caller's retry set is retried whatever its row says (and then counts as
maybe applied). A server that says explicitly whether to retry (`Stripe-Should-Retry`,
`x-should-retry`) overrides the retry column when the policy asks for it, never the
final column. Everything here is pure.

A refusal is only as good as what came before it: after an attempt that may have been
applied, a 4xx may be the server refusing a duplicate of what it already did (a
reference that already exists). `after_maybe_applied` says when such a refusal still
counts as the operation's answer.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Collection
from dataclasses import dataclass

import httpx

from ._profile import Profile

__all__ = [
    "EDGE_REFUSALS",
    "SUCCESSES",
    "AttemptKind",
    "Classification",
    "after_maybe_applied",
    "classify_error",
    "classify_response",
]


class AttemptKind(enum.StrEnum):
    SUCCEEDED = "succeeded"
    ACCEPTED = "accepted"
    REDIRECT = "redirect"
    IN_PROGRESS = "in_progress"
    THROTTLED = "throttled"
    SERVER_ERROR = "server_error"
    KEY_CONFLICT = "key_conflict"
    UNAUTHENTICATED = "unauthenticated"
    REJECTED = "rejected"
    NOT_SENT = "not_sent"
    UNSENDABLE = "unsendable"
    MAYBE_APPLIED = "maybe_applied"
    UNKNOWN = "unknown"
    EXISTING = "existing"
    REPLAYED = "replayed"
    CHALLENGED = "challenged"


@dataclass(frozen=True, slots=True)
class Classification:
    kind: AttemptKind
    #: try again with the same key (subject to attempts, deadline and budget)
    retry: bool
    #: this attempt may have reached the server and taken effect
    maybe_applied: bool
    #: the server's answer about the operation: stored as its result
    final: bool = False

    @property
    def handoff(self) -> bool:
        """Goes back to httpx (its auth flow, its redirect handling) unretried."""
        return not self.retry and self.kind in _HANDOFFS


def _row(
    kind: AttemptKind, retry: bool, maybe_applied: bool, final: bool = False
) -> tuple[AttemptKind, Classification]:
    return kind, Classification(kind, retry=retry, maybe_applied=maybe_applied, final=final)


# The table in the module docstring, row for row (the retry column of a status outside
# the retry set is the caller's: see `classify_response`).
_BY_KIND = dict(
    [
        _row(AttemptKind.SUCCEEDED, retry=False, maybe_applied=True, final=True),
        _row(AttemptKind.ACCEPTED, retry=True, maybe_applied=True),
        _row(AttemptKind.REDIRECT, retry=False, maybe_applied=True),
        _row(AttemptKind.IN_PROGRESS, retry=True, maybe_applied=True),
        _row(AttemptKind.THROTTLED, retry=True, maybe_applied=False),
        _row(AttemptKind.SERVER_ERROR, retry=True, maybe_applied=True),
        _row(AttemptKind.KEY_CONFLICT, retry=False, maybe_applied=False, final=True),
        _row(AttemptKind.UNAUTHENTICATED, retry=False, maybe_applied=False),
        _row(AttemptKind.REJECTED, retry=False, maybe_applied=False, final=True),
        _row(AttemptKind.NOT_SENT, retry=True, maybe_applied=False),
        _row(AttemptKind.UNSENDABLE, retry=False, maybe_applied=False),
        _row(AttemptKind.MAYBE_APPLIED, retry=True, maybe_applied=True),
        _row(AttemptKind.UNKNOWN, retry=False, maybe_applied=True),
        _row(AttemptKind.EXISTING, retry=False, maybe_applied=True),
        _row(AttemptKind.REPLAYED, retry=False, maybe_applied=True, final=True),
        _row(AttemptKind.CHALLENGED, retry=False, maybe_applied=False),
    ]
)

_HANDOFFS = frozenset({AttemptKind.UNAUTHENTICATED, AttemptKind.REDIRECT})
_HINT_HEADERS = ("stripe-should-retry", "x-should-retry")
#: The kinds that say a response is the answer to the operation, whatever came before.
SUCCESSES = frozenset({AttemptKind.SUCCEEDED, AttemptKind.EXISTING, AttemptKind.REPLAYED})


def classify_response(
    response: httpx.Response,
    *,
    retry_statuses: Collection[int],
    follow_server_hints: bool = False,
    profile: Profile | None = None,
    codes: frozenset[str] = frozenset(),
) -> Classification:
    """Classify a response by its status (and, if asked, the server's retry hint), as
    `profile` reads it (its error `codes` from the body, see `_profile.codes_in`)."""
    status = response.status_code
    kind: AttemptKind | None = None
    from_profile = False
    if profile is not None:
        if not 200 <= status < 300:
            kind, from_profile = _profile_kind(profile, status, response.headers, codes)
        elif profile.declined and _declined(profile, response, codes):
            return _BY_KIND[AttemptKind.REJECTED]  # declined in a success's body
    if kind is not None:
        pass
    elif status == 202:
        kind = AttemptKind.ACCEPTED
    elif 200 <= status < 300:
        return _BY_KIND[AttemptKind.SUCCEEDED]  # a final success is never second-guessed
    elif 300 <= status < 400:
        kind = AttemptKind.REDIRECT
    elif status == 409:
        kind = AttemptKind.IN_PROGRESS
    elif status in (429, 503):
        kind = AttemptKind.THROTTLED
    elif status == 422:
        kind = AttemptKind.KEY_CONFLICT
    elif status in (401, 407):
        kind = AttemptKind.UNAUTHENTICATED
    elif 400 <= status < 500:
        kind = AttemptKind.REJECTED
    elif 500 <= status < 600:
        kind = AttemptKind.SERVER_ERROR
    else:
        kind = AttemptKind.UNKNOWN
    result = _BY_KIND[kind]
    if kind in _PROFILE_KINDS:
        return result  # what the server said in its own dialect: no status set or hint
    if from_profile:
        # The profile's reading wins over the caller's retry set: a status it gives
        # another meaning is not retried, and its "still running" is, except that the
        # caller's set still decides for 409 (leaving 409 out means "do not poll").
        retry = kind in _POLLED and (status in retry_statuses or status != 409)
    else:
        retry = kind is AttemptKind.ACCEPTED or status in retry_statuses
    hints = _hints(profile, follow_server_hints)
    if hints and kind is not AttemptKind.KEY_CONFLICT:
        hint = _server_hint(response.headers, hints)
        if hint is not None:
            retry = hint
    if retry != result.retry:
        # The caller's retry set (or the server's hint) decides. A retried status may
        # have started work on the server: assume it may have. One that is not retried
        # is final only if its row is: a 5xx left out of the retry set is still no
        # answer about the payment.
        result = Classification(
            kind,
            retry=retry,
            maybe_applied=result.maybe_applied or retry,
            final=result.final and not retry,
        )
    return result


#: Refusals that a proxy, load balancer, CDN or firewall in front of a server answers
#: as readily as the server itself (forbidden by a rule, no such route, too large, a
#: timeout of its own): after an attempt that may have been applied, only a replay
#: marker makes one of them the server's stored answer.
EDGE_REFUSALS = frozenset({403, 404, 405, 408, 411, 413, 414, 421, 431})


def after_maybe_applied(
    found: Classification, *, status: int, replayed: bool, server_replays: bool
) -> Classification:
    """`found` for an attempt that follows one which may have been applied.

    A success stays final. A refusal (4xx) stays final only if it is the server's
    stored answer for the key: marked as a replay (`Idempotent-Replayed: true`), or
    from a server known to answer a finished key with its stored answer
    (`server_replays`), unless it is one of the `EDGE_REFUSALS` that something in front
    of the server may have given. Otherwise it may be the server refusing a duplicate
    of a payment it already made (a reference that already exists): indeterminate.
    """
    if not found.final or found.kind in SUCCESSES or replayed:
        return found
    if server_replays and status not in EDGE_REFUSALS:
        return found
    return Classification(found.kind, retry=False, maybe_applied=True, final=False)


def classify_error(error: BaseException) -> Classification:
    """Classify an exception raised while sending one attempt."""
    if isinstance(error, httpx.ConnectError) and _tls_verification_failed(error):
        return _BY_KIND[AttemptKind.UNSENDABLE]
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return _BY_KIND[AttemptKind.NOT_SENT]
    if isinstance(error, httpx.ProxyError):
        return _BY_KIND[AttemptKind.NOT_SENT]
    if isinstance(error, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return _BY_KIND[AttemptKind.UNSENDABLE]
    if isinstance(
        error,
        httpx.ReadTimeout
        | httpx.WriteTimeout
        | httpx.ReadError
        | httpx.WriteError
        | httpx.RemoteProtocolError
        | httpx.CloseError,
    ):
        return _BY_KIND[AttemptKind.MAYBE_APPLIED]
    return _BY_KIND[AttemptKind.UNKNOWN]


_GENERIC_MEANINGS = frozenset({409, 422})
_POLLED = frozenset({AttemptKind.IN_PROGRESS, AttemptKind.THROTTLED})
_PROFILE_KINDS = frozenset({AttemptKind.EXISTING, AttemptKind.REPLAYED, AttemptKind.CHALLENGED})


def _profile_kind(
    profile: Profile, status: int, headers: httpx.Headers, codes: frozenset[str]
) -> tuple[AttemptKind | None, bool]:
    """What `profile` says a non-2xx answer means (and True), or (None, False) for the
    generic table. An ordinary refusal in the profile's reading comes as (REJECTED,
    True) when the profile claims its status for another meaning, else (REJECTED,
    False): the caller's retry set still decides for it."""
    if profile.challenge is not None and profile.challenge.matches(status, headers, codes):
        return AttemptKind.CHALLENGED, True
    if profile.existing is not None and profile.existing.match.matches(status, headers, codes):
        return AttemptKind.EXISTING, True
    if profile.replay is not None and profile.replay.matches(status, headers, codes):
        return AttemptKind.REPLAYED, True
    if any(m.matches(status, headers, codes) for m in profile.mismatch):
        return AttemptKind.KEY_CONFLICT, True
    if any(m.matches(status, headers, codes) for m in profile.in_progress):
        return AttemptKind.IN_PROGRESS, True
    if any(m.matches(status, headers, codes) for m in profile.throttled):
        return AttemptKind.THROTTLED, True
    if 400 <= status < 500 and status in profile.claimed:
        return AttemptKind.REJECTED, True  # claimed for a meaning this answer lacks
    if status in _GENERIC_MEANINGS:
        # 409 "still running" and 422 "other request" are the IETF draft's: a profile
        # that gives them no such meaning reads them as ordinary refusals.
        return AttemptKind.REJECTED, False
    return None, False


def _declined(profile: Profile, response: httpx.Response, codes: frozenset[str]) -> bool:
    """A 2xx whose body says the payment was declined, in the profile's words."""
    status, headers = response.status_code, response.headers
    return any(m.matches(status, headers, codes) for m in profile.declined)


def _hints(profile: Profile | None, follow_server_hints: bool) -> tuple[str, ...]:
    names = tuple(h.lower() for h in profile.hints) if profile is not None else ()
    if follow_server_hints:
        names += tuple(h for h in _HINT_HEADERS if h not in names)
    return names


def _server_hint(headers: httpx.Headers, names: tuple[str, ...] = _HINT_HEADERS) -> bool | None:
    for name in names:
        value = headers.get(name)
        if value is not None:
            value = value.strip().lower()
            if value == "true":
                return True
            if value == "false":
                return False
    return None


def _tls_verification_failed(error: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
