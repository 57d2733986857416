import ssl

import httpx
import pytest

from idemclient._classify import (
    AttemptKind,
    after_maybe_applied,
    classify_error,
    classify_response,
)
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
        # Outside the retry set a 5xx is still no answer about the payment: indeterminate.
        (501, AttemptKind.SERVER_ERROR, False, True, False),
        (520, AttemptKind.SERVER_ERROR, False, True, False),  # a CDN in front of the PSP
        (524, AttemptKind.SERVER_ERROR, False, True, False),  # the CDN gave up waiting
        (422, AttemptKind.KEY_CONFLICT, False, False, True),  # key reused: client bug
        (400, AttemptKind.REJECTED, False, False, True),
        (401, AttemptKind.UNAUTHENTICATED, False, False, False),  # to httpx's auth flow
        (407, AttemptKind.UNAUTHENTICATED, False, False, False),
        (402, AttemptKind.REJECTED, False, False, True),
        (403, AttemptKind.REJECTED, False, False, True),
        (404, AttemptKind.REJECTED, False, False, True),
        # A redirect is neither a success nor a refusal; the request may have been handled.
        (301, AttemptKind.REDIRECT, False, True, False),
        (303, AttemptKind.REDIRECT, False, True, False),
        (307, AttemptKind.REDIRECT, False, True, False),
        (308, AttemptKind.REDIRECT, False, True, False),
        (304, AttemptKind.REDIRECT, False, True, False),
        # Statuses outside 2xx-5xx say nothing we can read: assume the worst.
        (199, AttemptKind.UNKNOWN, False, True, False),
        (600, AttemptKind.UNKNOWN, False, True, False),
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


@pytest.mark.parametrize(
    ("status", "handoff"),
    [
        (401, True),  # the auth flow may refresh the token and send it again
        (407, True),
        (302, True),  # httpx's redirect handling decides whether to follow
        (308, True),
        (403, False),
        (500, False),
        (201, False),
    ],
)
def test_what_goes_back_to_httpx(status: int, handoff: bool) -> None:
    assert classify_response(response(status), retry_statuses=RETRY).handoff is handoff


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


def test_a_5xx_the_server_says_not_to_retry_is_still_no_answer() -> None:
    found = classify_response(
        response(500, **{"Stripe-Should-Retry": "false"}),
        retry_statuses=RETRY,
        follow_server_hints=True,
    )
    assert (found.retry, found.final, found.maybe_applied) == (False, False, True)


def test_a_5xx_a_policy_leaves_out_is_indeterminate_not_failed() -> None:
    found = classify_response(response(500), retry_statuses=RETRY - {500})
    assert (found.kind, found.retry, found.final, found.maybe_applied) == (
        AttemptKind.SERVER_ERROR,
        False,
        False,
        True,
    )


@pytest.mark.parametrize(
    ("status", "replayed", "server_replays", "final"),
    [
        (201, False, False, True),  # a success is a success
        (422, False, False, False),  # "reference already exists": maybe our own first try
        (400, False, False, False),
        (402, False, False, False),
        (402, True, False, True),  # marked as the stored answer for this key
        (402, False, True, True),  # a server known to replay finished keys
        (422, False, True, True),
        (403, False, True, False),  # a firewall in front may have said it
        (404, False, True, False),  # so may a load balancer with no such route
        (404, True, True, True),  # unless it is marked as the stored answer
    ],
)
def test_a_refusal_after_an_attempt_that_may_have_been_applied(
    status: int, replayed: bool, server_replays: bool, final: bool
) -> None:
    found = after_maybe_applied(
        classify_response(response(status), retry_statuses=RETRY),
        status=status,
        replayed=replayed,
        server_replays=server_replays,
    )
    assert found.final is final
    assert found.retry is False
    assert found.maybe_applied is (True if not final else found.maybe_applied)


def test_an_unsettled_result_stays_unsettled_after_maybe_applied() -> None:
    found = classify_response(response(503), retry_statuses=RETRY)
    assert after_maybe_applied(found, status=503, replayed=False, server_replays=False) is found
