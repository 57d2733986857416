"""What the answer to a look-up says about one operation: pure, no store, no network.

One judgement (`judge`) serves `Client.reconcile` and the batch command alike:

- a 2xx with an empty list (`[]`, or `{"data": []}`): not found, never applied, unless
  it says more pages follow (`has_more`, a next page or cursor, `Link: rel=next`): a
  page cut short says nothing of the others, so that is unknown;
- a 2xx naming one payment (a list of one, or the payment itself): found, and its
  status decides what it came to;
- a 2xx naming several payments: ambiguous, for a person to settle;
- a 404: not found only when the caller says the look-up is reliable; otherwise
  unknown, since a 404 is as likely a wrong URL as a missing payment;
- anything else (another status, a body that is not JSON, no answer): unknown.

A found payment's status (`status` by default) decides what it came to, through a
mapping the caller may replace (`DEFAULT_STATUSES`): only `succeeded` and `completed`
are `succeeded`, `failed` and `declined` are `failed`; any other status (`pending`,
`processing`, `authorized`, none at all) is not final, and the operation stays
unsettled. A caller that knows what its rows hold (the batch) also passes `matches`:
a payment with other content is not this operation (finding `mismatch`).

A resource the server named itself (an "already done, here it is" answer) is judged by
`judge_created`; a fetched resource by `judge_resource`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import httpx

from .._outcome import State
from .._profile import Existing

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_STATUSES",
    "Finding",
    "Item",
    "LookupRules",
    "Verdict",
    "default_found",
    "judge",
    "judge_created",
    "judge_found",
    "judge_resource",
    "listed",
    "status_of",
]

Finding = Literal["found", "not_found", "mismatch", "ambiguous", "unknown"]

#: A payment's status on the server -> what the operation came to. Any status not
#: listed is not final: the operation stays unsettled.
DEFAULT_STATUSES: Mapping[str, State] = MappingProxyType(
    {
        "succeeded": State.SUCCEEDED,
        "completed": State.SUCCEEDED,
        "failed": State.FAILED,
        "declined": State.FAILED,
    }
)


@dataclass(frozen=True, slots=True)
class LookupRules:
    """How to read a look-up's answer.

    `statuses` maps a payment's status (compared without regard to case) to
    `State.SUCCEEDED` or `State.FAILED`; `status_field` is where the status is;
    `reliable_404`: the caller says a 404 from this look-up means "no such payment"
    (otherwise it means the look-up does not work).
    """

    statuses: Mapping[str, State] = field(default_factory=lambda: DEFAULT_STATUSES)
    status_field: str = "status"
    reliable_404: bool = False

    def __post_init__(self) -> None:
        lowered: dict[str, State] = {}
        for name, state in self.statuses.items():
            if State(state) not in (State.SUCCEEDED, State.FAILED):
                raise ValueError(
                    f"status {name!r} maps to {State(state).value}: a found payment is"
                    " succeeded or failed; leave statuses that are not final out"
                )
            lowered[name.strip().lower()] = State(state)
        object.__setattr__(self, "statuses", MappingProxyType(lowered))
        if not self.status_field:
            raise ValueError("status_field must name a field")


DEFAULT_RULES = LookupRules()

Item = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a look-up's answer says about one operation."""

    finding: Finding
    #: in words, for records, reports and errors
    why: str
    #: found: what the payment came to (`succeeded`, `failed`), None while not final
    state: State | None = None
    #: found: the payment
    item: Item | None = None
    #: mismatch and ambiguous: the payments the look-up named
    others: tuple[Item, ...] = ()

    @property
    def settles(self) -> bool:
        """The answer is definite: found with a final status, or not found."""
        return self.finding == "not_found" or (self.finding == "found" and self.state is not None)


def status_of(item: Item, rules: LookupRules) -> tuple[str | None, State | None]:
    """The payment's status as written, and what it came to (None: not final)."""
    value = item.get(rules.status_field)
    if not isinstance(value, str):
        return None, None
    return value, rules.statuses.get(value.strip().lower())


def listed(response: httpx.Response) -> list[Item] | str:
    """The payments a 2xx answer names, or why they cannot be read (a body that is
    not JSON, neither a list nor a payment, a list whose items are not payments)."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return "a body that is not JSON"
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        listed: object = body["data"]
    elif isinstance(body, list):
        listed = body
    elif isinstance(body, dict) and body:
        listed = [body]  # a look-up that answers with the payment itself
    else:
        return "neither a list nor a payment"
    assert isinstance(listed, list)
    if not all(isinstance(item, dict) and item for item in listed):
        return "a list whose items are not payments"
    return listed


#: Fields with which a list answer says that more pages follow (Stripe, Mollie, and
#: cursor APIs generally).
_MORE = ("has_more", "next_page", "next_page_url", "next", "next_cursor", "nextCursor")


def _more_follow(response: httpx.Response) -> str | None:
    """How the answer says it is one page of several (None: it is the whole answer).
    A page cut short says nothing of what is on the others: "no match" on it is not
    "not found"."""
    if 'rel="next"' in response.headers.get("link", "").replace("'", '"'):
        return "a Link header with rel=next"
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    for name in _MORE:
        value = body.get(name)
        if value not in (None, False, "", 0):
            return f"{name}: {value!r}"
    return None


def _described(item: Item, rules: LookupRules) -> str:
    status, _ = status_of(item, rules)
    name = item.get("id")
    shown = f"payment {name}" if isinstance(name, str | int) else "a payment"
    return f"{shown} with status {status!r}" if status is not None else f"{shown} with no status"


def judge(
    response: httpx.Response,
    rules: LookupRules = DEFAULT_RULES,
    *,
    matches: Callable[[Item], bool] | None = None,
) -> Verdict:
    """What `response`, the answer to a look-up, says (see the module docstring).

    `matches` says whether a payment the look-up names has this operation's content;
    without it, every payment named counts.
    """
    code = response.status_code
    if code == 404:
        if rules.reliable_404:
            return Verdict("not_found", "HTTP 404, which this look-up says means no such payment")
        return Verdict(
            "unknown",
            "HTTP 404: the look-up itself was not found (a wrong URL, path or look-up"
            " template?); a 404 means 'no such payment' only for a look-up said to be"
            " reliable",
        )
    if not 200 <= code < 300:
        return Verdict("unknown", f"HTTP {code}")
    items = listed(response)
    if isinstance(items, str):
        return Verdict("unknown", f"HTTP {code} with {items}")
    partial = _more_follow(response)
    if not items:
        if partial:
            return Verdict("unknown", f"HTTP {code} with an empty page of several ({partial})")
        return Verdict("not_found", f"HTTP {code} with no match")
    if matches is not None:
        same = [item for item in items if matches(item)]
        if not same:
            if partial:
                return Verdict(
                    "unknown",
                    f"HTTP {code} with one page of several ({partial}) and no payment of"
                    " this content on it",
                )
            return Verdict(
                "mismatch",
                f"HTTP {code} naming {len(items)} payment(s) with other content",
                others=tuple(items),
            )
        if len(same) > 1:
            return Verdict(
                "ambiguous",
                f"HTTP {code} naming {len(same)} payments with this content",
                others=tuple(same),
            )
        items = same
    states = {status_of(item, rules)[1] for item in items}
    if len(items) > 1 and len(states) > 1:
        return Verdict(
            "ambiguous",
            f"HTTP {code} naming {len(items)} payments that came to different ends",
            others=tuple(items),
        )
    item = items[0]
    (state,) = states
    ending = "" if state is not None else ", which is not final"
    return Verdict(
        "found", f"HTTP {code}: {_described(item, rules)}{ending}", state=state, item=item
    )


def judge_resource(response: httpx.Response, rules: LookupRules) -> Verdict:
    """What a fetched resource says of the payment it is: pure. Only a 2xx with a JSON
    object is read (the object itself, or the one object it wraps the resource in); its
    status decides, through `rules`, and a status that is not final (or none) is found
    but not final. Anything else is unknown: a resource the server named is never
    "not found"."""
    code = response.status_code
    if not 200 <= code < 300:
        return Verdict("unknown", f"HTTP {code}")
    try:
        body = json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        return Verdict("unknown", f"HTTP {code} with a body that is not JSON")
    if not isinstance(body, dict) or not body:
        return Verdict("unknown", f"HTTP {code} with a body that is not a resource")
    item: Item = body
    if rules.status_field not in body and len(body) == 1:
        (inner,) = body.values()
        if isinstance(inner, dict):
            item = inner  # an envelope: {"payments": {...}}
    _, state = status_of(item, rules)
    ending = "" if state is not None else ", which is not final"
    return Verdict(
        "found", f"HTTP {code}: {_described(item, rules)}{ending}", state=state, item=item
    )


def judge_created(response: httpx.Response, existing: Existing) -> Verdict:
    """What the resource an "already done, here it is" answer named says of the request
    that made it (see `Existing`): pure. The answer that request would have had is the
    resource, made: found, `succeeded`, whatever its status (the payment's own life
    since), unless its status is one the profile says only a refused creation leaves
    (`failed`) or a creation still running has (`creating`: found, not final). A fetch
    that gives no resource (not a 2xx, not a JSON object) is unknown: the resource was
    named, so never "not found"."""
    read = judge_resource(response, LookupRules(status_field=existing.status_field, statuses={}))
    if read.finding != "found" or read.item is None:
        return read
    item = read.item
    value = item.get(existing.status_field)
    status = value.strip().lower() if isinstance(value, str) else None
    name = item.get("id")
    shown = f"payment {name}" if isinstance(name, str | int) else "the payment"
    code = response.status_code
    if status is not None and status in existing.failed:
        why = f"{shown} with status {value!r}: the server refused the request that made it"
        return Verdict("found", f"HTTP {code}: {why}", state=State.FAILED, item=item)
    if status is not None and status in existing.creating:
        why = f"{shown} with status {value!r}: the request that makes it is still running"
        return Verdict("found", f"HTTP {code}: {why}", item=item)
    since = "" if value is None else f" (its status since: {value!r})"
    why = f"{shown}, made under this key: the request that made it succeeded{since}"
    return Verdict("found", f"HTTP {code}: {why}", state=State.SUCCEEDED, item=item)


def judge_found(response: httpx.Response, found: Callable[[httpx.Response], bool]) -> Verdict:
    """The judgement of a caller's own `found` (deprecated): True is a payment that
    succeeded, False is none; statuses other than 2xx judge as `judge` does."""
    if not 200 <= response.status_code < 300:
        return judge(response)
    if found(response):
        return Verdict("found", f"HTTP {response.status_code}, found", state=State.SUCCEEDED)
    return Verdict("not_found", f"HTTP {response.status_code}, not found")


def default_found(response: httpx.Response) -> bool:
    """The judgement `found=` used to default to: any 2xx naming something. Kept for
    callers that passed it explicitly; `judge` reads the payment's status instead."""
    items = listed(response)
    return not isinstance(items, str) and bool(items)
