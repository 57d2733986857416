"""A profile's dialect, pure: what the reference server decides for each built-in, one
table row at a time (no storage, no socket). The literal expectations are the
providers' facts; test_server_answers.py checks the answers they lead to."""

from __future__ import annotations

import pytest

from idemclient import profiles
from idemclient.testing import ServerRequest
from idemclient.testing._protocol.dialect import (
    Dialect,
    InFlight,
    Mismatch,
    Search,
    dialect_for,
    read_search,
)
from idemclient.testing._protocol.rules import Problem

R, N, E = InFlight.ANSWER, InFlight.RUN, InFlight.EXISTING
A, P, X, U = Mismatch.ANSWER, Mismatch.REPLAY, Mismatch.EXISTING, Mismatch.RUN

MODES = {
    # name: (still running, same key other request, stores a 402, records by request)
    "reference": (R, A, True, False),
    "generic": (R, A, True, False),
    "ietf": (R, A, True, False),
    "stripe": (R, A, True, False),
    "adyen": (R, P, True, False),
    "paypal": (N, P, True, False),
    "square": (N, A, True, False),
    "gocardless": (E, X, True, False),
    "checkout": (R, P, False, False),
    "wise": (N, P, True, False),
    "mollie": (R, A, True, False),
    "razorpay": (R, A, True, False),
    "django-idempotency-key": (N, U, False, True),
    "drf-idempotency-key": (R, A, True, False),
}


@pytest.mark.parametrize("name", list(MODES))
def test_each_built_in_s_decisions(name: str) -> None:
    dialect = dialect_for(name)
    in_flight, mismatch, stores_402, by_request = MODES[name]
    assert dialect.family == name
    assert dialect.in_flight is in_flight
    assert dialect.mismatch_mode is mismatch
    assert dialect.stores(402) is stores_402
    assert dialect.stores(201)
    assert dialect.records_by_request() is by_request


def test_the_default_is_the_reference_server_s_own() -> None:
    assert dialect_for(None).profile is profiles.reference
    assert not dialect_for(None).forgets_on_arrival
    assert dialect_for("stripe").forgets_on_arrival


@pytest.mark.parametrize(
    ("name", "path", "required"),
    [
        ("reference", "/v1/payments", True),
        ("stripe", "/v1/payment_intents", False),
        ("square", "/v2/payments", True),
        ("square", "/v2/orders", False),
        ("razorpay", "/v1/payouts", True),
        ("razorpay", "/v1/transfers", False),
        ("wise", "/v1/transfers", True),
        ("wise", "/v1/profiles/7/balance-movements", True),
        ("paypal", "/v2/checkout/orders", False),
    ],
)
def test_where_a_key_is_required(name: str, path: str, required: bool) -> None:
    assert dialect_for(name).requires_key(path) is required


def test_a_copy_with_another_name_is_a_profile_of_your_own() -> None:
    mine = Dialect(profiles.stripe.replace(name="stripe-eu"))
    assert mine.family is None
    assert mine.requires_key("/v1/payments")  # your own server requires its key
    assert mine.collection("/v1/payment_intents") is None  # no provider paths


def _get(path: str, query: str = "") -> ServerRequest:
    return ServerRequest.build("GET", path, query=query)


def test_stripe_s_look_up_is_read_from_its_template() -> None:
    stripe = dialect_for("stripe")
    query = "query=metadata%5B%27reference%27%5D%3A%27inv-1%27"
    assert stripe.read_lookup(_get("/v1/payment_intents/search", query)) == Search(
        (("reference", "inv-1"),)
    )
    with pytest.raises(Problem, match="Invalid search query"):  # read as Stripe reads it
        stripe.read_lookup(_get("/v1/payment_intents/search", "query=other"))
    assert stripe.read_lookup(_get("/v1/payment_intents/search")) is None
    assert stripe.read_lookup(_get("/v1/payments", query)) is None
    assert stripe.lookup_status("declined") == "canceled"
    assert stripe.lookup_status("succeeded") == "succeeded"
    assert stripe.lookup_status("pending") == "pending"


def test_a_look_up_in_the_path_and_by_key() -> None:
    mine = Dialect(
        profiles.generic.replace(
            name="mine", lookup=profiles.Lookup("/v1/orders/{reference}/payments?key={key}")
        )
    )
    asked = mine.read_lookup(_get("/v1/orders/inv%201/payments", "key=k-1"))
    assert asked == ("inv 1", "k-1")
    assert mine.read_lookup(_get("/v1/orders/a/b/payments", "key=k-1")) is None


def test_the_reference_look_up_is_the_collection_s_own_search() -> None:
    assert dialect_for("reference").read_lookup(_get("/v1/payments", "reference=r")) is None


def test_the_longest_retention_covers_every_endpoint() -> None:
    assert dialect_for("paypal").longest_retention == 45 * 24 * 3600
    assert dialect_for("mollie").longest_retention == 3600
    assert dialect_for("paypal").retention("POST", "/v2/checkout/orders") == 6 * 3600


@pytest.mark.parametrize(
    ("query", "read"),
    [
        ("metadata['reference']:'a'", Search((("reference", "a"),))),
        ('metadata["reference"]:"a b"', Search((("reference", "a b"),))),  # double quotes
        ("metadata['reference']:'it\\'s'", Search((("reference", "it's"),))),  # \' is '
        ("status:succeeded", Search((("status", "succeeded"),))),  # a bare word
        (
            "metadata['reference']:'x' OR status:'y'",
            Search((("reference", "x"), ("status", "y")), any_of=True),
        ),
        (
            "metadata['reference']:'x' AND status:'y'",
            Search((("reference", "x"), ("status", "y"))),
        ),
    ],
)
def test_a_stripe_search_query_is_read_as_stripe_reads_it(query: str, read: Search) -> None:
    assert read_search(query) == read


@pytest.mark.parametrize(
    "query",
    [
        "metadata['reference']:'it's'",  # an unescaped quote ends the string early
        "metadata['reference']:'open",  # never closed
        "amount:'1'",  # a field the server does not search
        "status:'1' OR status:'2' AND status:'3'",  # AND with OR
        "",
    ],
)
def test_a_search_query_stripe_would_refuse_is_a_400(query: str) -> None:
    with pytest.raises(Problem) as raised:
        read_search(query)
    assert raised.value.status == 400
