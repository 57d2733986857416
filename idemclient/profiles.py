"""Server profiles: each payment API's idempotency dialect, as a value.

Choose one with one argument: ``Client(..., profile="stripe")`` (or
``profile=profiles.stripe``), the same on `AsyncClient` and `wrap()`, and
``idemclient batch submit --profile stripe``. Make your own from a built-in::

    mine = profiles.stripe.replace(name="stripe-connect", key_retention=12 * 3600)

Every fact below is from the provider's public documentation or official SDK (the
sources are in docs/profiles.md). Where a provider publishes nothing, the profile takes
the safe reading and says so in `Profile.assumptions`: a key retention it does not
publish is the shortest any provider publishes (one hour), and a server not known to
answer a second request with a running key is not retried after an attempt that may
have been applied (`guards_in_flight=False`: the operation stops as indeterminate, and
`reconcile()` or a later `resume()` settles it).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._profile import (
    DAY,
    HOUR,
    SHORTEST_PUBLISHED_RETENTION,
    Endpoint,
    Existing,
    KeyFormat,
    KeySlot,
    Lookup,
    Match,
    Profile,
)

__all__ = [
    "BUILTIN",
    "DEFAULT",
    "Endpoint",
    "Existing",
    "KeyFormat",
    "KeySlot",
    "Lookup",
    "Match",
    "Profile",
    "adyen",
    "checkout",
    "django_idempotency_key",
    "drf_idempotency_key",
    "generic",
    "gocardless",
    "ietf",
    "mollie",
    "named",
    "paypal",
    "razorpay",
    "reference",
    "square",
    "stripe",
    "wise",
]

_UUID = KeyFormat(
    36,
    36,
    pattern=r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    described="a UUID",
)
_UNPUBLISHED_RETENTION = (
    "the key retention is not published: the shortest any provider publishes (1 hour) is assumed"
)
_UNGUARDED = (
    "a second request with a key still running is not known to be refused: after an"
    " attempt that may have been applied the client does not retry (indeterminate;"
    " reconcile or resume later)"
)


def _statuses(*codes: int) -> frozenset[int]:
    return frozenset(codes)


#: Only what the IETF draft says, and a key retention that is an assumption: check
#: your provider's. The default.
generic = Profile(
    name="generic",
    assumptions="the key retention (24 hours) is an assumption: check your provider's",
)

#: The IETF draft (-06) to the letter: the key is a structured-field quoted string, 409
#: while the first request runs, 422 for the key reused with another request, and the
#: completed result (errors included) replayed without a marker.
ietf = Profile(
    name="ietf",
    key=KeySlot("Idempotency-Key", quoted=True),
    methods=frozenset({"POST", "PATCH"}),
    replay_marker=None,
    replays_errors=True,
    assumptions="the key retention is the server's to publish: 24 hours is assumed",
)

#: The reference server (`idemclient server`, `idemclient.testing.ReferenceServer`).
reference = Profile(
    name="reference",
    replays_errors=True,
    retention_published=True,
    # Every collection of the reference server is searched by reference: an operation
    # is looked up in its own (a payout among payouts, never among payments).
    lookup=Lookup("{path}?reference={reference}"),
)

stripe = Profile(
    name="stripe",
    key_format=KeyFormat(1, 255),
    methods=frozenset({"POST"}),
    key_retention=DAY,
    retention_published=True,
    replays_errors=True,
    in_progress=(Match(_statuses(409)),),
    mismatch=(Match(_statuses(400, 404), codes=frozenset({"idempotency_error"})),),
    hints=("Stripe-Should-Retry",),
    code_paths=("error.type", "error.code"),
    endpoints=(Endpoint("/v2/*", methods=frozenset({"POST", "DELETE"}), key_retention=30 * DAY),),
    lookup=Lookup(
        "/v1/payment_intents/search?query=metadata%5B%27reference%27%5D%3A%27{reference}%27",
        succeeded=frozenset({"succeeded"}),
        failed=frozenset({"canceled"}),
        quoting="search",
        # It searches PaymentIntents: "none found" says nothing of a payout or a refund.
        covers=("*/v1/payment_intents",),
    ),
    # stripe-python's DEFAULT_API_BASE, DEFAULT_UPLOAD_API_BASE and
    # DEFAULT_METER_EVENTS_API_BASE; test mode is a key, not a host.
    hosts=("api.stripe.com", "files.stripe.com", "meter-events.stripe.com"),
    assumptions=("v1 keys are kept at least 24 hours (the profile uses 24 h); v2 (/v2/) 30 days"),
)

adyen = Profile(
    name="adyen",
    key_format=KeyFormat(1, 64),
    methods=frozenset({"POST"}),
    key_retention=7 * DAY,
    retention_published=True,
    replay_marker=None,
    in_progress=(
        Match(_statuses(409, 422), codes=frozenset({"704"})),
        Match(_statuses(409, 422), header=("transient-error", "true")),
    ),
    mismatch=(),
    hints=(),
    # docs.adyen.com/development-resources/refusal-reasons: a refused authorisation
    # answers 200, its `resultCode` Refused, Error or Cancelled.
    declined=(Match(_statuses(200, 201), codes=frozenset({"refused", "error", "cancelled"})),),
    code_paths=("errorCode", "resultCode"),
    # The Adyen Python library's settings (test hosts, and each live one with the
    # company's prefix where Adyen gives one) and docs.adyen.com/development-resources/
    # live-endpoints: every API takes the key on POST (api-idempotency).
    hosts=(
        "checkout-test.adyen.com",
        "*-checkout-live.adyenpayments.com",
        "pal-test.adyen.com",
        "*-pal-live.adyenpayments.com",
        "balanceplatform-api-test.adyen.com",
        "balanceplatform-api-live.adyen.com",
        "management-test.adyen.com",
        "management-live.adyen.com",
        "kyc-test.adyen.com",
        "kyc-live.adyen.com",
        "ca-test.adyen.com",
        "ca-live.adyen.com",
        "postfmapi-test.adyen.com",
        "postfmapi-live.adyen.com",
    ),
    assumptions=(
        "keys are kept at least 7 days (Adyen's current page says 31, an older one 7:"
        " the shorter is used) and are not shared between regional endpoints (keep one"
        " region per operation); an answer to a key reused with another request is not"
        " published, so none is read as one"
    ),
)

paypal = Profile(
    name="paypal",
    key=KeySlot("PayPal-Request-Id"),
    methods=frozenset({"POST"}),
    key_retention=6 * HOUR,
    retention_published=True,
    replay_marker=None,
    in_progress=(),
    mismatch=(),
    guards_in_flight=False,
    code_paths=("name", "details.*.issue"),
    endpoints=(
        Endpoint("/v2/checkout/orders*", key_format=KeyFormat(1, 108), key_retention=6 * HOUR),
        Endpoint("/v2/payments/*", key_retention=45 * DAY),
    ),
    # developer.paypal.com/api/rest (base URLs), and api.paypal.com, which PayPal names
    # for callers that must allow-list an address (and its older SDKs used).
    hosts=(
        "api-m.paypal.com",
        "api-m.sandbox.paypal.com",
        "api.paypal.com",
        "api.sandbox.paypal.com",
    ),
    assumptions=(
        "orders keep a request id 6 hours (72 on request), payments 45 days; a second"
        " request while the first runs 'might fail', so: " + _UNGUARDED
    ),
)

square = Profile(
    name="square",
    key=KeySlot(header=None, field="idempotency_key"),
    key_format=KeyFormat(1, 45),
    methods=frozenset({"POST"}),
    key_retention=SHORTEST_PUBLISHED_RETENTION,
    replay_marker=None,
    in_progress=(),
    mismatch=(Match(_statuses(400), codes=frozenset({"idempotency_key_reused"})),),
    guards_in_flight=False,
    code_paths=("errors.*.code",),
    endpoints=(
        Endpoint("/v2/payments", methods=frozenset({"POST"}), key_format=KeyFormat(1, 45)),
        Endpoint("/v2/orders", methods=frozenset({"POST"}), key_format=KeyFormat(1, 192)),
        Endpoint("/v2/refunds", methods=frozenset({"POST"}), key_format=KeyFormat(1, 45)),
        Endpoint("/v2/terminals/*", key_format=KeyFormat(1, 64)),
        Endpoint("/v2/bookings*", key_format=KeyFormat(1, 255)),
    ),
    # square-python-sdk's SquareEnvironment.
    hosts=("connect.squareup.com", "connect.squareupsandbox.com"),
    assumptions=(
        "the key's length limit differs per endpoint (45 for payments, 192 for orders):"
        " 45, the shortest, elsewhere; " + _UNPUBLISHED_RETENTION + "; " + _UNGUARDED
    ),
)

gocardless = Profile(
    name="gocardless",
    methods=frozenset({"POST"}),
    key_retention=SHORTEST_PUBLISHED_RETENTION,
    replay_marker=None,
    in_progress=(),
    mismatch=(),
    existing=Existing(
        Match(_statuses(409), codes=frozenset({"idempotent_creation_conflict"})),
        id_path="error.errors.*.links.conflicting_resource_id",
        # A payment GoCardless names was created: its creation answered 201, whatever
        # it has become since (pending_submission, its first status, up to paid_out,
        # or failed, cancelled, charged back: its own life, read from the resource).
        # The reference server speaking this dialect names in the same way a payment it
        # declined (its creation answered 402) and one whose request it is still
        # running (pending, authorized: no answer yet).
        failed=frozenset({"declined"}),
        creating=frozenset({"pending", "authorized"}),
    ),
    guards_in_flight=False,
    code_paths=("error.errors.*.reason",),
    # gocardless-pro-python's Client._environment_url.
    hosts=("api.gocardless.com", "api-sandbox.gocardless.com"),
    assumptions=(
        "no replay: a key used before is answered 409 naming the resource, which is"
        " fetched and is the creation's answer (its status, the payment's life since); "
        + _UNPUBLISHED_RETENTION
        + "; "
        + _UNGUARDED
    ),
)

checkout = Profile(
    name="checkout",
    key=KeySlot("Cko-Idempotency-Key"),
    methods=frozenset({"POST"}),
    key_retention=DAY,
    retention_published=True,
    replay_marker=None,
    in_progress=(Match(_statuses(409)),),
    mismatch=(),
    unstored=_statuses(500, 502, 504),
    # checkout.com/docs/resources/codes/http-response-codes: a declined card answers
    # a 2xx, its `status` Declined (`approved` false, `response_code` 2xxxx-4xxxx).
    declined=(Match(_statuses(200, 201), codes=frozenset({"declined"})),),
    code_paths=("status",),
    # checkout.com/docs/developer-resources/api/api-endpoints (each merchant's own base
    # URL, its prefix from the client id) and checkout-sdk-python's Environment.
    hosts=(
        "api.checkout.com",
        "api.sandbox.checkout.com",
        "*.api.checkout.com",
        "*.api.sandbox.checkout.com",
    ),
    assumptions=(
        "keys are kept 24 hours (configurable in production: set yours); only 2xx"
        " answers are kept, so a 5xx is not retried under its key (it would run again)"
    ),
)

wise = Profile(
    name="wise",
    key=KeySlot(header=None, field="customerTransactionId"),
    key_format=_UUID,
    methods=frozenset({"POST"}),
    key_retention=SHORTEST_PUBLISHED_RETENTION,
    replay_marker=None,
    in_progress=(),
    mismatch=(),
    challenge=Match(_statuses(403), header=("x-2fa-approval", "*")),
    guards_in_flight=False,
    endpoints=(
        Endpoint("*/balance-movements", key=KeySlot("X-idempotence-uuid"), key_format=_UUID),
    ),
    # docs.wise.com (getting started; environments: TLS and mTLS endpoints, the
    # sandbox's current and earlier hosts) and api.transferwise.com, Wise's former name.
    hosts=(
        "api.wise.com",
        "api-mtls.transferwise.com",
        "api.transferwise.com",
        "api.wise-sandbox.com",
        "api-mtls.wise-sandbox.com",
        "api.sandbox.transferwise.tech",
        "api-mtls.sandbox.transferwise.tech",
    ),
    assumptions=(
        "the key is the transfer's customerTransactionId (a UUID in the body); balance"
        " movements take it in the X-idempotence-uuid header; "
        + _UNPUBLISHED_RETENTION
        + "; "
        + _UNGUARDED
    ),
)

mollie = Profile(
    name="mollie",
    methods=frozenset({"POST"}),
    key_retention=HOUR,
    retention_published=True,
    in_progress=(Match(_statuses(409)),),
    mismatch=(),
    # Mollie's API clients' API_ENDPOINT; test mode is a key, not a host.
    hosts=("api.mollie.com",),
    assumptions="keys are kept one hour",
)

razorpay = Profile(
    name="razorpay",
    key=KeySlot("X-Payout-Idempotency"),
    key_format=KeyFormat(4, 36, pattern=r"[A-Za-z0-9_\-]+", described="4-36 of A-Z a-z 0-9 _ -"),
    methods=frozenset({"POST"}),
    key_retention=7 * DAY,
    retention_published=True,
    replay_marker=None,
    in_progress=(
        Match(_statuses(500), codes=frozenset({"idempotency_key_in_use"})),
        Match(_statuses(409)),
    ),
    mismatch=(),
    code_paths=("error.code", "error.reason"),
    endpoints=(
        # Keys are read on Create Payout (composite too) and Direct Transfers only: a
        # refund, an order or a transfer from a payment would carry a key the server
        # ignores, and a retry of it would run twice. Those take no key here.
        Endpoint("*/v1/payouts", methods=frozenset({"POST"})),
        Endpoint(
            "*/v1/transfers",
            methods=frozenset({"POST"}),
            key=KeySlot("X-Transfer-Idempotency"),
            key_retention=SHORTEST_PUBLISHED_RETENTION,
        ),
        Endpoint("*", keyed=False),
    ),
    # razorpay.com/docs/api (and the SDKs' BASE_URL); test mode is a key, not a host.
    hosts=("api.razorpay.com",),
    assumptions=(
        "payout keys are kept 7 days; a failed payout stays failed under its key (a new"
        " operation is a new key); a payout whose key is still running is answered HTTP"
        " 500 with the reason idempotency_key_in_use, and polled; transfers' retention is"
        " not published (1 hour assumed); keys are read on POST /v1/payouts and"
        " /v1/transfers only: every other request takes none (the client refuses it)"
    ),
)

django_idempotency_key = Profile(
    name="django-idempotency-key",
    key_retention=300.0,
    replay_marker=None,
    replay=Match(_statuses(409)),
    in_progress=(),
    throttled=(Match(_statuses(423)),),
    mismatch=(),
    guards_in_flight=False,
    assumptions=(
        "a replay is answered 409 with the stored body (only 2xx answers are stored);"
        " two requests with one key both run, and a changed body runs again: the client"
        " never retries after an attempt that may have been applied; records live in"
        " the Django cache, 300 s by default"
    ),
)

drf_idempotency_key = Profile(
    name="drf-idempotency-key",
    key_format=_UUID,
    key_retention=SHORTEST_PUBLISHED_RETENTION,
    replay_marker=None,
    replays_errors=True,
    in_progress=(Match(_statuses(409), codes=frozenset({"request in progress"})),),
    mismatch=(Match(_statuses(409), codes=frozenset({"parameter mismatch"})),),
    code_paths=("detail", "message", "error"),
    assumptions="keys must be UUIDs; " + _UNPUBLISHED_RETENTION,
)

#: The built-in profiles by name.
BUILTIN: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            generic,
            ietf,
            reference,
            stripe,
            adyen,
            paypal,
            square,
            gocardless,
            checkout,
            wise,
            mollie,
            razorpay,
            django_idempotency_key,
            drf_idempotency_key,
        )
    }
)
DEFAULT = generic


def named(profile: str | Profile | None) -> Profile:
    """`profile` as a `Profile`: a built-in's name, a profile, or None for the default."""
    if profile is None:
        return DEFAULT
    if isinstance(profile, Profile):
        return profile
    try:
        return BUILTIN[profile]
    except KeyError:
        raise ValueError(
            f"no profile named {profile!r}; the built-in ones are: {', '.join(BUILTIN)}"
        ) from None
