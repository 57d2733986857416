import ssl

import httpx
import pytest

from idemclient._classify import AttemptKind, classify_error, classify_response
from idemclient._policy import RetryPolicy

RETRY = RetryPolicy().retry_statuses


def response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers)


@pytest.mark.parametrize(
    ("status", "kind", "retry", "maybe_applied", "final"),
    [
        (200, AttemptKind.SUCCEEDED, False, True, True),
        (201, AttemptKind.SUCCEEDED, False, True, True),
        (204, AttemptKind.SUCCEEDED, False, True, True),
        (202, AttemptKind.ACCEPTED, True, True, False),  # pending: poll, never final
        (409, AttemptKind.IN_PROGRESS, True, True, False),  # another attempt is in flight
        (429, AttemptKind.THROTTLED, True, False, False),  # never a result
        (503, AttemptKind.THROTTLED, True, False, False),
        (500, AttemptKind.SERVER_ERROR, True, True, False),  # maybe applied: same key
        (502, AttemptKind.SERVER_ERROR, True, True, False),
        (504, AttemptKind.SERVER_ERROR, True, True, False),
        (501, AttemptKind.SERVER_ERROR, False, True, True),  # not in the table: final
        (422, AttemptKind.KEY_CONFLICT, False, False, True),  # key reused: client bug
        (400, AttemptKind.REJECTED, False, False, True),
        (401, AttemptKind.UNAUTHENTICATED, False, False, False),  # refused before processing
        (407, AttemptKind.UNAUTHENTICATED, False, False, False),
        (402, AttemptKind.REJECTED, False, False, True),
        (403, AttemptKind.REJECTED, False, False, True),
        (404, AttemptKind.REJECTED, False, False, True),
        (301, AttemptKind.REJECTED, False, False, True),
    ],
)
def test_status_table(
    status: int, kind: AttemptKind, retry: bool, maybe_applied: bool, final: bool
) -> None:
    found = classify_response(response(status), retry_statuses=RETRY)
    assert (found.kind, found.retry, found.maybe_applied, found.final) == (
        kind,
        retry,
        maybe_applied,
        final,
    )


def tls_failure() -> httpx.ConnectError:
    try:
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed")
        except ssl.SSLError as inner:
            raise httpx.ConnectError("TLS handshake failed") from inner
    except httpx.ConnectError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "kind", "retry", "maybe_applied"),
    [
        (httpx.ConnectError("refused"), AttemptKind.NOT_SENT, True, False),
        (httpx.ConnectTimeout("slow connect"), AttemptKind.NOT_SENT, True, False),
        (httpx.PoolTimeout("no connection free"), AttemptKind.NOT_SENT, True, False),
        (httpx.ProxyError("proxy said no"), AttemptKind.NOT_SENT, True, False),
        (tls_failure(), AttemptKind.UNSENDABLE, False, False),  # retrying cannot fix it
        (httpx.UnsupportedProtocol("ftp://"), AttemptKind.UNSENDABLE, False, False),
        (httpx.LocalProtocolError("bad header"), AttemptKind.UNSENDABLE, False, False),
        (httpx.WriteError("broken pipe"), AttemptKind.MAYBE_APPLIED, True, True),
        (httpx.WriteTimeout("slow write"), AttemptKind.MAYBE_APPLIED, True, True),
        (httpx.ReadError("reset"), AttemptKind.MAYBE_APPLIED, True, True),
        (httpx.ReadTimeout("slow answer"), AttemptKind.MAYBE_APPLIED, True, True),
        (httpx.RemoteProtocolError("peer closed"), AttemptKind.MAYBE_APPLIED, True, True),
        (httpx.CloseError("close failed"), AttemptKind.MAYBE_APPLIED, True, True),
        (RuntimeError("a bug somewhere"), AttemptKind.UNKNOWN, False, True),  # assume the worst
    ],
)
def test_error_table(error: Exception, kind: AttemptKind, retry: bool, maybe_applied: bool) -> None:
    found = classify_error(error)
    assert (found.kind, found.retry, found.maybe_applied, found.final) == (
        kind,
        retry,
        maybe_applied,
        False,
    )


def test_retry_statuses_are_the_callers_choice() -> None:
    without_409 = RETRY - {409}
    found = classify_response(response(409), retry_statuses=without_409)
    assert (found.retry, found.maybe_applied, found.final) == (False, True, False)
    with_408 = RETRY | {408}
    found = classify_response(response(408), retry_statuses=with_408)
    # A retried 4xx may have started work: giving up later must say indeterminate.
    assert (found.retry, found.maybe_applied) == (True, True)


@pytest.mark.parametrize(
    ("status", "hint", "retry"),
    [
        (400, "true", True),  # Stripe's lock timeouts: retry despite the 4xx
        (500, "false", False),  # the server knows retrying is useless
        (503, "TRUE", True),
        (409, "maybe", True),  # garbage hint: the table decides
    ],
)
def test_server_hints_override_when_followed(status: int, hint: str, retry: bool) -> None:
    found = classify_response(
        response(status, **{"Stripe-Should-Retry": hint}),
        retry_statuses=RETRY,
        follow_server_hints=True,
    )
    assert found.retry is retry


def test_server_hints_ignored_by_default() -> None:
    found = classify_response(response(400, **{"x-should-retry": "true"}), retry_statuses=RETRY)
    assert found.retry is False


def test_success_is_never_second_guessed_by_a_hint() -> None:
    found = classify_response(
        response(201, **{"x-should-retry": "true"}), retry_statuses=RETRY, follow_server_hints=True
    )
    assert found.final
    assert found.kind is AttemptKind.SUCCEEDED
