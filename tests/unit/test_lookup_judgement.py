"""One judgement of a look-up's answer, for `reconcile()` and the batch command alike."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from idemclient import State
from idemclient._reconcile import LookupRules, judge, judge_created, judge_found
from idemclient.profiles import Existing, Match

RELIABLE = LookupRules(reliable_404=True)


def answer(status: int, body: Any = None, *, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
    return httpx.Response(status, content=content)


def paid(status: str | None = "succeeded", **fields: Any) -> dict[str, Any]:
    payment = {"id": "po_1", "amount": 100, "currency": "GBP", **fields}
    if status is not None:
        payment["status"] = status
    return payment


@pytest.mark.parametrize(
    ("response", "rules", "finding", "state"),
    [
        # no match, said plainly: never applied
        (answer(200, {"object": "list", "data": []}), LookupRules(), "not_found", None),
        (answer(200, []), LookupRules(), "not_found", None),
        # one payment: its status decides
        (answer(200, {"data": [paid()]}), LookupRules(), "found", State.SUCCEEDED),
        (answer(200, {"data": [paid("completed")]}), LookupRules(), "found", State.SUCCEEDED),
        (answer(200, {"data": [paid("Succeeded")]}), LookupRules(), "found", State.SUCCEEDED),
        (answer(200, {"data": [paid("declined")]}), LookupRules(), "found", State.FAILED),
        (answer(200, {"data": [paid("failed")]}), LookupRules(), "found", State.FAILED),
        (answer(200, {"data": [paid("pending")]}), LookupRules(), "found", None),
        (answer(200, {"data": [paid("processing")]}), LookupRules(), "found", None),
        (answer(200, {"data": [paid("authorized")]}), LookupRules(), "found", None),
        (answer(200, {"data": [paid(None)]}), LookupRules(), "found", None),  # no status
        (answer(200, {"data": [paid(7)]}), LookupRules(), "found", None),  # not a word
        (answer(200, paid()), LookupRules(), "found", State.SUCCEEDED),  # the payment itself
        (answer(200, [paid()]), LookupRules(), "found", State.SUCCEEDED),
        # several that agree, or not
        (answer(200, {"data": [paid(), paid(id="po_2")]}), LookupRules(), "found", State.SUCCEEDED),
        (answer(200, {"data": [paid(), paid("pending")]}), LookupRules(), "ambiguous", None),
        # a 404 is a look-up that does not work, unless the caller says otherwise
        (answer(404, {"title": "Not found"}), LookupRules(), "unknown", None),
        (answer(404, {"title": "Not found"}), RELIABLE, "not_found", None),
        # anything else tells nothing
        (answer(500), LookupRules(), "unknown", None),
        (answer(401), LookupRules(), "unknown", None),
        (answer(302), LookupRules(), "unknown", None),
        (answer(200, raw=b"<html>ok</html>"), LookupRules(), "unknown", None),
        (answer(200, raw=b""), LookupRules(), "unknown", None),
        (answer(200, {}), LookupRules(), "unknown", None),
        (answer(200, None, raw=b"null"), LookupRules(), "unknown", None),
        (answer(200, {"data": ["po_1"]}), LookupRules(), "unknown", None),
        (answer(204), LookupRules(), "unknown", None),
    ],
)
def test_judge(
    response: httpx.Response, rules: LookupRules, finding: str, state: State | None
) -> None:
    verdict = judge(response, rules)
    assert (verdict.finding, verdict.state) == (finding, state)
    assert verdict.settles is (finding == "not_found" or state is not None)


def test_the_status_mapping_and_field_are_the_callers() -> None:
    rules = LookupRules(statuses={"PAID": State.SUCCEEDED}, status_field="state")
    assert judge(answer(200, [{"state": "paid"}]), rules).state is State.SUCCEEDED
    # the mapping replaces the default: "succeeded" means nothing to this API
    assert judge(answer(200, [{"state": "succeeded"}]), rules).state is None
    with pytest.raises(ValueError, match="succeeded or failed"):
        LookupRules(statuses={"pending": State.INDETERMINATE})
    with pytest.raises(ValueError, match="status_field"):
        LookupRules(status_field="")


def test_with_a_row_to_match_other_content_is_a_mismatch_and_two_matches_ambiguous() -> None:
    def matches(item: Any) -> bool:
        return bool(item["amount"] == 100)

    other = answer(200, {"data": [paid(amount=150)]})
    verdict = judge(other, matches=matches)
    assert verdict.finding == "mismatch"
    assert verdict.others == (paid(amount=150),)
    one = judge(answer(200, {"data": [paid(amount=150), paid("pending")]}), matches=matches)
    assert (one.finding, one.state, one.item) == ("found", None, paid("pending"))
    two = judge(answer(200, {"data": [paid(), paid(id="po_2")]}), matches=matches)
    assert two.finding == "ambiguous"


def test_a_verdict_says_what_it_saw() -> None:
    assert "payment po_1 with status 'declined'" in judge(answer(200, [paid("declined")])).why
    assert "not final" in judge(answer(200, [paid("pending")])).why
    assert "a wrong URL" in judge(answer(404)).why


def test_a_callers_own_found_keeps_its_old_meaning() -> None:
    assert judge_found(answer(200, [paid("declined")]), lambda r: True).state is State.SUCCEEDED
    assert judge_found(answer(200, [paid()]), lambda r: False).finding == "not_found"
    assert judge_found(answer(503), lambda r: True).finding == "unknown"


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({"object": "list", "data": [], "has_more": True}, {}),  # Stripe
        ({"data": [], "next_page": "/v1/payouts?cursor=2"}, {}),
        ({"data": [], "next_cursor": "abc"}, {}),
        ({"data": []}, {"link": '</v1/payouts?page=2>; rel="next"'}),
    ],
)
def test_an_empty_page_of_several_is_not_not_found(
    body: dict[str, object], headers: dict[str, str]
) -> None:
    response = httpx.Response(200, json=body, headers=headers)
    assert judge(response).finding == "unknown"


def test_a_page_of_several_without_this_rows_payment_is_not_a_mismatch() -> None:
    other = {"id": "po_1", "reference": "E1", "amount": 5, "currency": "EUR"}
    response = httpx.Response(200, json={"data": [other], "has_more": True})
    assert judge(response, matches=lambda item: False).finding == "unknown"


def test_the_last_page_is_a_whole_answer() -> None:
    response = httpx.Response(200, json={"data": [], "has_more": False, "next_page": None})
    assert judge(response).finding == "not_found"


# -- a resource named as made under the key ("already done, here it is") ----------------

#: the generic reading: every status is the creation's success, none says otherwise
CREATED = Existing(Match(frozenset({409})), id_path="id")
#: a profile that names what a refused creation, and one still running, look like
NAMED = Existing(
    Match(frozenset({409})),
    id_path="id",
    failed=frozenset({"Declined"}),
    creating=frozenset({"pending"}),
)


@pytest.mark.parametrize(
    ("response", "existing", "finding", "state"),
    [
        # made: the creation succeeded, whatever the payment's life since
        (answer(201, paid("pending_submission")), CREATED, "found", State.SUCCEEDED),
        (answer(200, {"payments": paid("failed")}), CREATED, "found", State.SUCCEEDED),
        (answer(200, paid("declined")), CREATED, "found", State.SUCCEEDED),
        (answer(200, paid(None)), CREATED, "found", State.SUCCEEDED),  # no status at all
        (answer(200, paid("paid_out")), NAMED, "found", State.SUCCEEDED),
        # the profile's words for a refused creation (any case), and one still running
        (answer(200, paid("declined")), NAMED, "found", State.FAILED),
        (answer(200, {"payments": paid("PENDING")}), NAMED, "found", None),
        # no resource to read: unknown, never "not found" (the server named it)
        (answer(404, {"error": "not found"}), CREATED, "unknown", None),
        (answer(503), CREATED, "unknown", None),
        (answer(200, raw=b"<html>"), CREATED, "unknown", None),
        (answer(200, []), CREATED, "unknown", None),
    ],
)
def test_judge_created(
    response: httpx.Response, existing: Existing, finding: str, state: State | None
) -> None:
    verdict = judge_created(response, existing)
    assert (verdict.finding, verdict.state) == (finding, state), verdict.why


def test_existing_succeeded_is_no_longer_read_and_says_so() -> None:
    with pytest.warns(DeprecationWarning, match="no longer read"):
        Existing(Match(frozenset({409})), id_path="id", succeeded=frozenset({"confirmed"}))
