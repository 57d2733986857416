"""Looking a row's reference up on the server before its first send: the network's half.

The judgement of an answer is `_reconcile.judge`, shared with `Client.reconcile`, with
one rule of the batch's on top (`refined`): a payment counts as this row only if it
shows this row's reference (in `LookupSettings.reference_field`) or its key. A look-up
whose filter the server ignores answers with other rows' payments: those are set aside
("not found" when they are all of other references), and a payment that shows neither
cannot be told apart, so the look-up does not work until the field is named. Here is
otherwise only the asking: one GET per row, retried while the answer says "later" (429, 503,
a 5xx, a dropped connection or a timeout), within the client's retry policy (attempts,
deadline, the server's Retry-After as a floor), on the client's clock.

A look-up that gets no definite answer did not work, and what to do about it depends
on why (`Trouble`, `trouble_of`): the server said "later" or did not answer (run again
later: nothing about the row or the look-up is wrong), the credentials were refused
(check the token), there is no such look-up here (check the URL, path and template;
only here does going without a look-up make sense), the look-up was refused for
another reason, or its answer cannot be read as this row's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .._seam import (
    Http,
    LookupRules,
    Op,
    Pause,
    Unquotable,
    Verdict,
    backoff_ceiling,
    fill,
    judge,
    listed,
    parse_date,
)
from ..clock import Clock
from ..policy import RetryPolicy, parse_retry_after
from ._matching import KEY_FIELD, matches_payment, shows_row

__all__ = [
    "DEFAULT_LOOKUP",
    "Asked",
    "Asking",
    "LookupSettings",
    "Trouble",
    "asked",
    "later",
    "next_wait",
    "refined",
    "trouble_of",
    "works",
]

#: The default look-up: the collection rows are POSTed to, searched by reference (the
#: reference server's `GET /v1/payouts?reference=R`). `{path}` is the batch's path.
DEFAULT_LOOKUP = "{path}?reference={reference}"

#: A look-up is a read: asked at least this often, whatever the rows' own max_attempts.
MIN_ATTEMPTS = 3
#: Answers that say "ask again later", not "this is what the server holds".
_LATER = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Server errors that are no passing trouble: not implemented, a version or a network
#: login the server will not get past by waiting.
_NEVER_LATER = frozenset({501, 505, 511})
#: No such look-up at this URL: a missing search, or a method it does not take.
_ABSENT = frozenset({404, 405, 501})
_CREDENTIALS = frozenset({401, 407})


def later(status: int) -> bool:
    """Whether an answer with `status` says "later" rather than anything about the
    look-up: a rate limit, a timeout, a server or gateway in trouble."""
    return status in _LATER or (500 <= status < 600 and status not in _NEVER_LATER)


class Trouble(enum.Enum):
    """Why a look-up did not work, by what the operator is to do about it."""

    #: the server said "later" (429, 503, another 5xx) or did not answer: nothing is
    #: wrong with the look-up; run again later (the batch's exit code 3)
    LATER = "later"
    #: the credentials were refused (401, 407): check the token
    CREDENTIALS = "credentials"
    #: no such look-up here (404, 405, 501, an answer that is not a list or a payment):
    #: a wrong URL, path or template, or a server without one (the one case for
    #: sending without a look-up)
    ABSENT = "absent"
    #: refused for another reason (403, another 4xx, a redirect): the template, or
    #: what the token may read
    REFUSED = "refused"
    #: answered, but not in a way that says whether this row was paid (payments that
    #: show neither the reference nor the key, a page of several, a reference the
    #: template cannot carry)
    UNCLEAR = "unclear"


def trouble_of(verdict: Verdict, response: httpx.Response | None) -> Trouble | None:
    """Why the look-up that came to `verdict` (on `response`, None: no answer) did
    not work, or None if it did: pure."""
    if works(verdict):
        return None
    if response is None:
        return Trouble.LATER
    status = response.status_code
    if later(status):
        return Trouble.LATER
    if status in _CREDENTIALS:
        return Trouble.CREDENTIALS
    if status in _ABSENT:
        return Trouble.ABSENT
    if 200 <= status < 300:
        return Trouble.ABSENT if isinstance(listed(response), str) else Trouble.UNCLEAR
    return Trouble.REFUSED


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
    #: why it did not work (None: it did)
    trouble: Trouble | None = None
    #: how often it was asked
    attempts: int = 1
    #: the wait the server asked for (Retry-After, seconds) with its last answer, when
    #: it said "later"
    server_wait: float | None = None
    #: the server's time when it answered (its `Date`, a lower bound), if it said
    server_at: float | None = None
    #: not asked now: an earlier run's "nothing found", kept and believed
    #: (`_remembered`)
    remembered: bool = False


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


@dataclass(frozen=True, slots=True)
class LookupRetry:
    """A row's look-up asked again: after `attempt` asks, it met `evidence`, and asks
    again in `wait` seconds."""

    reference: str
    url: str
    attempt: int
    evidence: str
    wait: float

    def line(self) -> str:
        """For `--verbose`, as the retries of a payment are shown."""
        return (
            f"retry: look-up of {self.reference} after attempt {self.attempt}:"
            f" {self.evidence}; next look-up in {self.wait:.2f}s"
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

    def retry(self, result: httpx.Response | Exception, wait: float) -> LookupRetry:
        """The look-up is asked again after `wait` seconds: what it met."""
        if isinstance(result, httpx.Response):
            evidence = f"HTTP {result.status_code}"
        else:
            evidence = (
                f"{type(result).__name__}: {result}" if str(result) else type(result).__name__
            )
        return LookupRetry(self._reference, self.url, self._attempts, evidence, wait)

    def unasked(self) -> Asked | None:
        """What the look-up comes to without asking: a reference the template cannot
        carry safely is no look-up that works (never "not found")."""
        if self.refused is None:
            return None
        return Asked(
            self.url, Verdict("unknown", self.refused), None, trouble=Trouble.UNCLEAR, attempts=0
        )

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
            trouble = trouble_of(verdict, result)
            server_wait = (
                parse_retry_after(result.headers, clock.time())
                if trouble is Trouble.LATER
                else None
            )
            return Asked(
                self.url,
                verdict,
                result,
                at,
                trouble,
                self._attempts,
                server_wait=server_wait,
                server_at=parse_date(result.headers.get("date", "")),
            )
        why = f"{type(result).__name__}: {result}" if str(result) else type(result).__name__
        return Asked(
            self.url,
            Verdict("unknown", f"no answer ({why})"),
            None,
            at,
            Trouble.LATER,
            self._attempts,
        )


def asked(
    asking: Asking,
    clock: Clock,
    timeout: float,
    on_retry: Callable[[LookupRetry], None] | None = None,
    waiting: Callable[[bool], None] | None = None,
) -> Op[Asked]:
    """Carry out `asking` through plain GETs of the client (no key, no store), as a step
    (see `_operations`): the same for a sync and an async client. `on_retry` is told
    before each wait to ask again; `waiting(True)` too, and `waiting(False)` once the
    wait is over (the progress counts the look-ups waiting)."""
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
        if on_retry is not None:
            on_retry(asking.retry(result, step))
        if waiting is not None:
            waiting(True)
        try:
            yield Pause(clock, step)
        finally:
            if waiting is not None:
                waiting(False)
