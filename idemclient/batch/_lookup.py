"""Looking a row's reference up on the server before its first send: the network's half.

The judgement of an answer is `_reconcile.judge`, shared with `Client.reconcile`, with
one rule of the batch's on top (`refined`): a payment counts as this row only if it
shows this row's reference (in `LookupSettings.reference_field`) or its key. A look-up
whose filter the server ignores answers with other rows' payments: those are set aside
("not found" when they are all of other references), and a payment that shows neither
cannot be told apart, so the look-up does not work until the field is named. Here is
otherwise only the asking: one GET per row, retried while the answer says "later" (429, 503,
a 5xx, a dropped connection or a timeout), within the client's retry policy (attempts,
deadline, the server's Retry-After as a floor), on the client's clock. A look-up that
never gets a definite answer counts as a look-up that does not work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .._clock import Clock
from .._operations import Http, Op, Pause
from .._policy import RetryPolicy, backoff_ceiling
from .._reconcile import LookupRules, Unquotable, Verdict, fill, judge
from .._retry_after import parse_retry_after
from ._plan import KEY_FIELD, matches_payment, shows_row

__all__ = [
    "DEFAULT_LOOKUP",
    "Asked",
    "Asking",
    "LookupSettings",
    "asked",
    "next_wait",
    "refined",
    "works",
]

#: The default look-up: the collection rows are POSTed to, searched by reference (the
#: reference server's `GET /v1/payouts?reference=R`). `{path}` is the batch's path.
DEFAULT_LOOKUP = "{path}?reference={reference}"

#: A look-up is a read: asked at least this often, whatever the rows' own max_attempts.
MIN_ATTEMPTS = 3
#: Answers that say "ask again later", not "this is what the server holds".
_LATER = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class LookupSettings:
    """How a batch looks its rows up: where (`template`, relative to the client's base
    URL, with `{reference}` and optionally `{key}`) and how to read the answer."""

    template: str
    rules: LookupRules
    #: the field of a payment that holds the reference the row was sent with
    reference_field: str = "reference"


@dataclass(frozen=True, slots=True)
class Asked:
    """One row's look-up: where, what came back, and what it says."""

    url: str
    verdict: Verdict
    response: httpx.Response | None
    #: when the request that answered was sent: a "not found" is as old as that
    at: float | None = None


def next_wait(
    policy: RetryPolicy,
    attempts: int,
    result: httpx.Response | Exception,
    *,
    now: float,
    remaining: float,
) -> float | None:
    """Seconds to wait before asking again, or None to stop: pure.

    Asked again only after an answer that says "later" or no answer at all, at most
    `policy.max_attempts` times (and at least `MIN_ATTEMPTS`), waiting the backoff
    ceiling or the server's Retry-After, whichever is longer, never past the deadline.
    """
    if isinstance(result, httpx.Response):
        if result.status_code not in _LATER:
            return None
        server = parse_retry_after(result.headers, now)
    elif isinstance(result, httpx.TransportError):
        server = None
    else:
        return None
    if attempts >= max(policy.max_attempts, MIN_ATTEMPTS):
        return None
    if server is not None and server > policy.max_retry_after:
        return None
    wait = max(backoff_ceiling(policy, attempts), server or 0.0)
    return None if wait >= remaining else wait


#: What a look-up that works says about a row; any other finding (`unknown`, or one a
#: later judgement adds) means the look-up does not work, and nothing is sent.
_WORKING = frozenset({"found", "not_found", "mismatch", "ambiguous"})


def works(verdict: Verdict) -> bool:
    """Whether `verdict` is a look-up's definite word about a row."""
    return verdict.finding in _WORKING


def refined(
    verdict: Verdict, status: int, *, reference: str, key: str | None, reference_field: str
) -> Verdict:
    """`verdict` once the payments that are not this row's are set aside (see the
    module docstring): pure. Only a "mismatch" changes: it stands for the payments that
    show this row's reference or key; none such, it is "not found" when every payment
    shows another reference, and "unknown" when one shows neither."""
    if verdict.finding != "mismatch":
        return verdict
    shown = [
        (item, shows_row(item, reference=reference, key=key, reference_field=reference_field))
        for item in verdict.others
    ]
    mine = tuple(item for item, is_mine in shown if is_mine)
    if mine:
        return dataclasses.replace(
            verdict,
            others=mine,
            why=f"HTTP {status} naming {len(mine)} payment(s) of this reference with other content",
        )
    if all(is_mine is False for _item, is_mine in shown):
        return Verdict(
            "not_found",
            f"HTTP {status} naming {len(shown)} payment(s) of other references only: no match",
        )
    return Verdict(
        "unknown",
        f"HTTP {status} naming payment(s) that show neither {reference_field!r} nor"
        f" {KEY_FIELD!r}: the look-up cannot tell whether one of them is this row. Name the"
        " field of a payment that holds the reference with --lookup-reference-field"
        " (reference_field= from Python)",
    )


class Asking:
    """One row's look-up, decided here and carried out by `asked`:
    `url` to GET, then `answered(result)` says how long to wait before asking again,
    or what the look-up came to."""

    def __init__(
        self,
        settings: LookupSettings,
        *,
        key: str,
        reference: str,
        payload: Mapping[str, Any],
        policy: RetryPolicy,
        clock: Clock,
    ) -> None:
        #: why the look-up is not asked at all (a reference the template cannot carry)
        self.refused: str | None = None
        try:
            self.url = fill(settings.template, key=key, reference=reference, name=reference)
        except Unquotable as exc:
            self.url = settings.template.replace("{reference}", "<reference>")
            self.refused = str(exc)
        self._settings = settings
        self._payload = payload
        self._policy = policy
        self._clock = clock
        self._reference = reference
        self._key = key
        self._started = clock.monotonic()
        self._attempts = 0

    def unasked(self) -> Asked | None:
        """What the look-up comes to without asking: a reference the template cannot
        carry safely is no look-up that works (never "not found")."""
        if self.refused is None:
            return None
        return Asked(self.url, Verdict("unknown", self.refused), None)

    def answered(
        self, result: httpx.Response | Exception, *, at: float | None = None
    ) -> float | Asked:
        self._attempts += 1
        policy, clock = self._policy, self._clock
        wait = next_wait(
            policy,
            self._attempts,
            result,
            now=clock.time(),
            remaining=policy.deadline - (clock.monotonic() - self._started),
        )
        if wait is not None:
            return wait
        if isinstance(result, httpx.Response):
            payload, field = self._payload, self._settings.reference_field
            reference, key = self._reference, self._key

            def matches(item: Mapping[str, Any]) -> bool:
                return matches_payment(
                    payload, item, reference=reference, key=key, reference_field=field
                )

            verdict = refined(
                judge(result, self._settings.rules, matches=matches),
                result.status_code,
                reference=reference,
                key=key,
                reference_field=field,
            )
            return Asked(self.url, verdict, result, at)
        why = f"{type(result).__name__}: {result}" if str(result) else type(result).__name__
        return Asked(self.url, Verdict("unknown", f"no answer ({why})"), None, at)


def asked(asking: Asking, clock: Clock, timeout: float) -> Op[Asked]:
    """Carry out `asking` through plain GETs of the client (no key, no store), as a step
    (see `_operations`): the same for a sync and an async client."""
    unasked = asking.unasked()
    if unasked is not None:
        return unasked
    while True:
        result: httpx.Response | Exception
        at = clock.time()
        try:
            result = yield Http("get", (asking.url,), {"timeout": timeout})
        except httpx.TransportError as exc:
            result = exc
        step = asking.answered(result, at=at)
        if isinstance(step, Asked):
            return step
        yield Pause(clock, step)
