"""What one attempt's result means: the attempt classification table, as code.

| observed                                          | kind           | retry | maybe applied |
|---------------------------------------------------|----------------|-------|---------------|
| 2xx except 202                                    | SUCCEEDED      | no    | yes (final)   |
| 202 Accepted                                      | ACCEPTED       | yes   | yes           |
| 409 Conflict                                      | IN_PROGRESS    | yes   | yes           |
| 429, 503                                          | THROTTLED      | yes   | no            |
| 500, 502, 504                                     | SERVER_ERROR   | yes   | yes           |
| 422                                               | KEY_CONFLICT   | no    | no (final)    |
| 401, 407                                          | UNAUTHENTICATED| no    | no            |
| any other status                                  | REJECTED       | no    | no (final)    |
| connect error or timeout, pool timeout, proxy     | NOT_SENT       | yes   | no            |
| TLS verification failure, bad URL scheme, request |                |       |               |
|   httpx could not write at all                    | UNSENDABLE     | no    | no            |
| write/read error or timeout, peer dropped         | MAYBE_APPLIED  | yes   | yes           |
| anything else raised by the transport             | UNKNOWN        | no    | yes           |

401 and 407 are not answers about the payment but about the credentials: the server
refuses them before any processing. The operation ends `not_sent` (fix the credentials
and resume with the same key) rather than `failed`, so that a wrong token does not mark
a whole batch as finally refused.

A server that says explicitly whether to retry (`Stripe-Should-Retry`, `x-should-retry`)
overrides the retry column when the policy asks for it. Everything here is pure.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Collection
from dataclasses import dataclass

import httpx

__all__ = ["AttemptKind", "Classification", "classify_error", "classify_response"]


class AttemptKind(enum.StrEnum):
    SUCCEEDED = "succeeded"
    ACCEPTED = "accepted"
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


@dataclass(frozen=True, slots=True)
class Classification:
    kind: AttemptKind
    #: try again with the same key (subject to attempts, deadline and budget)
    retry: bool
    #: this attempt may have reached the server and taken effect
    maybe_applied: bool

    @property
    def final(self) -> bool:
        """The server gave an answer that ends the operation (stored as its result)."""
        return not self.retry and self.kind in _ANSWERS


def _row(kind: AttemptKind, retry: bool, maybe_applied: bool) -> tuple[AttemptKind, Classification]:
    return kind, Classification(kind, retry=retry, maybe_applied=maybe_applied)


# The table in the module docstring, row for row.
_BY_KIND = dict(
    [
        _row(AttemptKind.SUCCEEDED, retry=False, maybe_applied=True),
        _row(AttemptKind.ACCEPTED, retry=True, maybe_applied=True),
        _row(AttemptKind.IN_PROGRESS, retry=True, maybe_applied=True),
        _row(AttemptKind.THROTTLED, retry=True, maybe_applied=False),
        _row(AttemptKind.SERVER_ERROR, retry=True, maybe_applied=True),
        _row(AttemptKind.KEY_CONFLICT, retry=False, maybe_applied=False),
        _row(AttemptKind.UNAUTHENTICATED, retry=False, maybe_applied=False),
        _row(AttemptKind.REJECTED, retry=False, maybe_applied=False),
        _row(AttemptKind.NOT_SENT, retry=True, maybe_applied=False),
        _row(AttemptKind.UNSENDABLE, retry=False, maybe_applied=False),
        _row(AttemptKind.MAYBE_APPLIED, retry=True, maybe_applied=True),
        _row(AttemptKind.UNKNOWN, retry=False, maybe_applied=True),
    ]
)

_ANSWERS = frozenset(
    {
        AttemptKind.SUCCEEDED,
        AttemptKind.KEY_CONFLICT,
        AttemptKind.REJECTED,
        AttemptKind.SERVER_ERROR,
    }
)
_HINT_HEADERS = ("stripe-should-retry", "x-should-retry")


def classify_response(
    response: httpx.Response,
    *,
    retry_statuses: Collection[int],
    follow_server_hints: bool = False,
) -> Classification:
    """Classify a response by its status (and, if asked, the server's retry hint)."""
    status = response.status_code
    if status == 202:
        kind = AttemptKind.ACCEPTED
    elif 200 <= status < 300:
        return _BY_KIND[AttemptKind.SUCCEEDED]  # a final success is never second-guessed
    elif status == 409:
        kind = AttemptKind.IN_PROGRESS
    elif status in (429, 503):
        kind = AttemptKind.THROTTLED
    elif status == 422:
        kind = AttemptKind.KEY_CONFLICT
    elif status in (401, 407):
        kind = AttemptKind.UNAUTHENTICATED
    elif status >= 500:
        kind = AttemptKind.SERVER_ERROR
    else:
        kind = AttemptKind.REJECTED
    result = _BY_KIND[kind]
    retry = kind is AttemptKind.ACCEPTED or status in retry_statuses
    if retry != result.retry:
        # The caller's set of retryable statuses decides. A status retried against the
        # table's advice may have started work on the server: assume it may have.
        result = Classification(kind, retry=retry, maybe_applied=result.maybe_applied or retry)
    if follow_server_hints:
        hint = _server_hint(response.headers)
        if hint is not None and hint != result.retry:
            # Same reasoning as above: a retry the table would not make may follow work.
            applied = result.maybe_applied or hint
            result = Classification(kind, retry=hint, maybe_applied=applied)
    return result


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


def _server_hint(headers: httpx.Headers) -> bool | None:
    for name in _HINT_HEADERS:
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
