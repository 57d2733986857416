"""What to do with each row, decided before anything is sent: pure functions.

For every row the store is asked what it knows (by the row's operation id, and for
rows recorded by earlier versions, by its reference), and `plan_row` decides:

- the store knows nothing of it: NEW, registered then sent with the row's key;
- the row, with other content: REFUSED, showing the old and the new values; unless
  nothing of it can have been applied (`_corrections`): REOPEN under its key, or NEW
  under a key of its own (a refusal the server may keep under the old one);
- the row, finished (succeeded, or failed for the payment's sake) where this run sends
  it: DONE, its answer. Where is the origin (scheme, host, port) and the credentials
  (see `_sender`; unknown for rows of earlier versions, which are compared by origin);
- the row, finished at another origin or with other credentials (a sandbox, a test
  key, another account): ELSEWHERE, looked up here; done only if the look-up finds it
  here, refused otherwise (and refused outright without look-ups);
- the row, never applied: pending or not sent at another URL or with other
  credentials, or refused for its target (404, 405) at another URL, or for its
  credentials (401, 407) anywhere: REOPEN, the corrected request under the same key;
- the row, maybe applied at another URL or with other credentials: REFUSED, to be
  finished where it went;
- the row, unfinished, at this URL: KNOWN, its recorded request under its key.

NEW rows are looked up on the server first (look-ups on), and so are KNOWN and REOPEN
rows that have never been attempted (their first send is to come), that may have been
applied (a lost answer, a sender that died mid-attempt: the server may have forgotten
the key sooner than --key-retention says), or whose record is old.

"Old" is a record older than the server's key retention, counting the clock skew the
client allows between hosts (`_time.CLOCK_SKEW`: a record's age may be that much more
than it looks), by this clock or by the server's where the client knows it (as the
run plans: `RunState.server_time_of`), by the client's own rule (`_time.retained`), or
of unknown age (created in the future by the clock's reckoning). A
row recorded by an earlier version (its key from the batch reference and the value
date) is found by its reference: in no scope, the one record with that reference is
this row (more than one: refused, with how to scope them); in a scope, the record whose
earlier key this scope would have made, else one with the very same content, else
none.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from .. import State
from .._seam import NEVER_APPLIED_STATUSES, origin_of, provider_at, retained, same
from ..store import OperationRecord, ServerTime
from ._identity import RowIdentity, is_batch_operation, same_text

if TYPE_CHECKING:
    from ._advice import Commands
    from ._corrections import Correction

    #: The judge of a known row's other content (`_corrections.correcting`).
    Correct = Callable[[RowIdentity, OperationRecord, Mapping[str, Any]], Correction | str | None]
from ._sender import target_of

__all__ = [
    "ELSEWHERE_ADVICE",
    "OTHER_CREDENTIALS_ADVICE",
    "SCOPE_ADVICE",
    "Request",
    "RowAction",
    "RowPlan",
    "differences",
    "encode_body",
    "legacy_candidates",
    "past_retention",
    "plan_row",
    "recorded_payload",
    "same_content",
]


SCOPE_ADVICE = (
    "a known reference is never paid again under other content: a new payment needs a"
    " new reference. If references repeat across files (an employee id every month),"
    " give each file its own scope with --batch-ref (batch_reference= from Python),"
    " e.g. --batch-ref 2026-12; the server then sees <scope>/<reference>"
)


#: Credentials refused: the token is not stored, so it may have been fixed since.
_CREDENTIALS = frozenset({401, 407})


class RowAction(enum.Enum):
    """What to do with a row, decided before anything is asked or sent."""

    #: the store does not know the row: register it, then send it with its key
    NEW = "new"
    #: unfinished: send its recorded request with its recorded key
    KNOWN = "known"
    #: finished: its recorded answer stands; nothing is sent
    DONE = "done"
    #: never applied where it went: point it at this run's request, same key, and send
    REOPEN = "reopen"
    #: refused before anything is sent
    REFUSED = "refused"
    #: finished at another origin or with other credentials: done only if a look-up
    #: finds it here, refused otherwise
    ELSEWHERE = "elsewhere"


@dataclass(frozen=True, slots=True)
class Request:
    """The request this run would send for a row."""

    url: str
    body: bytes
    #: the row's content, without the key
    payload: Mapping[str, Any]
    #: the JSON body field the key goes in, where the server profile reads it there
    #: (the body then holds it; the payload never does)
    key_field: str | None = None
    #: the key in `body`, when it holds one
    key: str | None = None

    def body_for(self, reference: str | None, key: str | None = None) -> bytes:
        """The body this row would have been sent with under `reference` (a row
        recorded by an earlier version, or in another scope, carries its own), and,
        where the key is in the body, under `key` (that record's)."""
        same_key = self.key_field is None or key is None or key == self.key
        if (reference is None or reference == self.payload.get("reference")) and same_key:
            return self.body
        payload = {**self.payload, "reference": reference or self.payload.get("reference")}
        if self.key_field is not None:
            payload[self.key_field] = key if key is not None else self.key
        return encode_body(payload)


def encode_body(payload: Mapping[str, object]) -> bytes:
    """A row's JSON body, encoded here rather than by httpx, so that the bytes
    registered and the bytes sent are the same whatever httpx version encodes JSON (and
    the same as every earlier version of the batch made)."""
    return _JSON.encode(payload).encode()


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: The content type of every row's body.
JSON_BODY = "application/json"


@dataclass(frozen=True, slots=True)
class RowPlan:
    #: what to do with the row
    decision: RowAction
    #: what the store holds for the row (None for NEW)
    record: OperationRecord | None = None
    #: look the reference up on the server before anything is sent
    look_up: bool = False
    #: in words: why it is refused, or why it is reopened
    why: str = ""
    #: what to do about it, said once for every row it concerns
    advice: str = ""
    #: sent as another identity than the row's own (a corrected content's, with a key
    #: of its own: `_corrections`)
    identity: RowIdentity | None = None
    #: the row was refused or never sent, and its content corrected since: in words
    corrected: str = ""


#: Most rows of a new file: one plan shared by all of them.
_NEW = RowPlan(RowAction.NEW)
_NEW_LOOKED_UP = RowPlan(RowAction.NEW, look_up=True)


def recorded_payload(
    record: OperationRecord, key_field: str | None = None
) -> dict[str, Any] | None:
    """The JSON object a record was sent with, without its key (`key_field`, where the
    key is in the body); None when its body was not kept."""
    try:
        body = json.loads(record.body) if record.body else None
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if key_field is not None:
        body.pop(key_field, None)
    return body


def differences(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Each column whose value changed, as ``name: old -> new``; the reference is the
    identity, not the content, and is left out."""
    changed = []
    for name in sorted(set(before) | set(after), key=lambda n: (n not in after, n)):
        if name == "reference":
            continue
        old, new = before.get(name, _ABSENT), after.get(name, _ABSENT)
        if not same_text(old, new):  # texts in NFC: two forms of one name are one
            changed.append(f"{name} {_shown(old)} -> {_shown(new)}")
    return changed


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


_ABSENT: Any = _Absent()


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def past_retention(
    record: OperationRecord,
    *,
    now: float,
    retention: float,
    server: ServerTime | None = None,
) -> bool:
    """Older than the server's key retention, or of unknown age, by the client's rule
    (`_time.retained`): its age by this clock, and by the server's where `server` (its
    time now, by its `Date`) is known, measured from the record's stamp and from the
    server's time at its first send where the record keeps it (`server_created_at`),
    the oldest standing, may be up to `CLOCK_SKEW` more than it looks (the host that
    recorded it was fast); a record dated after `now` (the clock went back, or another
    host's is ahead) may be any age, and so may one a clock was seen to go back while
    it was unfinished (`clock_stepped`): it may have been recorded by that clock
    running fast."""
    if record.clock_stepped is not None:
        return True
    return not retained(
        record.created_at,
        now=now,
        retention=retention,
        server=server,
        server_stamped=record.server_created_at,
    )


def legacy_candidates(
    records: Iterable[OperationRecord], identity: RowIdentity
) -> list[OperationRecord]:
    """The records an earlier version of the batch command made that may be this row:
    keyed by operation id = key, POSTed with the row's own reference."""
    return [
        record
        for record in records
        if record.reference is not None
        and same_text(record.reference, identity.bare)
        and record.operation_id == record.key
        and not is_batch_operation(record.operation_id)
        and record.method == "POST"
    ]


def _on_purpose(record: OperationRecord) -> str:
    """What finishing `record` under its own profile also needs where the provider of
    its host speaks another: the command's word that it is on purpose."""
    known = provider_at(httpx.URL(record.url).host)
    if known is None or known.name == (record.profile or "generic"):
        return ""
    return (
        f" --no-profile-by-host (its host is the {known.name} profile's provider's, whose"
        " server read none of its keys: a row that may have been applied is looked up"
        " before anything is sent again)"
    )


def same_content(record: OperationRecord, request: Request) -> bool | None:
    """Whether `record` was sent with `request`'s content, whatever reference it was
    sent under (None: cannot tell). Its recorded body when it has one; once reaped, its
    fingerprint, taken with the record's own path and its own reference (a row of an
    earlier version, or of another scope, carried another one)."""
    recorded = recorded_payload(record, request.key_field)
    if recorded is not None:
        return not differences(recorded, request.payload)
    if record.body:
        return None
    body = request.body_for(record.reference, record.key)
    url = httpx.URL(target_of(record.url))
    if same(record.fingerprint, "POST", url, body, content_type=JSON_BODY):
        return True
    # Sent, by an earlier version, with its texts as its file had them: decomposed.
    decomposed = unicodedata.normalize("NFD", body.decode()).encode()
    return decomposed != body and same(
        record.fingerprint, "POST", url, decomposed, content_type=JSON_BODY
    )


def _adopted(
    identity: RowIdentity,
    scope: str | None,
    legacy: Sequence[OperationRecord],
    legacy_key: str | None,
    request: Request,
) -> OperationRecord | str | None:
    """The earlier version's record that is this row, a refusal, or None."""
    if not legacy:
        return None
    if scope is not None:
        exact = [r for r in legacy if r.key == legacy_key]
        if exact:
            return exact[0]
        same = [r for r in legacy if same_content(r, request)]
        if len(same) > 1:
            return (
                f"reference {identity.bare!r} was paid {len(same)} times with this content"
                " by an earlier version; settle it by hand before submitting it again"
            )
        # Records with other content belong to other scopes (other months).
        return same[0] if same else None
    if len(legacy) == 1:
        return legacy[0]
    same = [r for r in legacy if same_content(r, request)]
    if len(same) == 1:
        return same[0]
    return (
        f"reference {identity.bare!r} is recorded {len(legacy)} times in the store, by"
        " earlier files in which it repeated: give this file a scope with --batch-ref"
    )


def plan_row(
    identity: RowIdentity,
    request_of: Callable[[], Request],
    *,
    known: OperationRecord | None,
    legacy: Sequence[OperationRecord] = (),
    scope: str | None = None,
    legacy_key: str | None = None,
    now: float,
    retention: float,
    look_up: bool = True,
    other_credentials: Callable[[OperationRecord], bool] = lambda _record: False,
    profile: str = "generic",
    commands: Commands | None = None,
    correct: Correct | None = None,
    server_time: Callable[[OperationRecord], ServerTime | None] = lambda _record: None,
) -> RowPlan:
    """What to do with one row (see the module docstring). `request_of()` makes the
    request this run would send for it (only needed, and so only made, when the store
    knows something of the row); `known` is the store's record under the row's
    operation id, `legacy` the earlier version's records with its reference
    (`legacy_candidates`); `look_up` says whether look-ups are on;
    `other_credentials(record)` whether the record says it was sent with other
    credentials than this run's (`_sender.Sender.other`); `commands`: the run's, for the
    commands a refusal prints (`_advice`); `correct`: the judge of a known row's other
    content, where it may be a correction of a row never applied (`_corrections`);
    `server_time(record)`: the server's time at `now` to judge the record's age by, if
    the client knows it (`past_retention`)."""
    if known is None and not legacy:
        return _NEW_LOOKED_UP if look_up else _NEW
    request = request_of()
    record: OperationRecord | None = known
    if record is None:
        adopted = _adopted(identity, scope, legacy, legacy_key, request)
        if isinstance(adopted, str):
            return RowPlan(RowAction.REFUSED, why=adopted)
        record = adopted
    if record is None:
        return _NEW_LOOKED_UP if look_up else _NEW
    if (record.profile or "generic") != profile:
        return RowPlan(
            RowAction.REFUSED,
            record,
            why=(
                f"was sent under the {record.profile or 'generic'} server profile, and this"
                f" run speaks {profile}: a row is never sent on under another profile (its"
                " key may be where that server does not look). Finish it with"
                f" --profile {record.profile or 'generic'}{_on_purpose(record)}"
            ),
        )
    same = same_content(record, request)
    fix = (
        None if same is not False or correct is None else correct(identity, record, request.payload)
    )
    if isinstance(fix, str):
        return RowPlan(
            RowAction.REFUSED, record, why=f"was submitted before with other content: {fix}"
        )
    if fix is not None:
        if fix.reopen:  # the same key, pointed at the corrected content
            return RowPlan(
                RowAction.REOPEN,
                record,
                look_up=look_up,
                why="its content corrected",
                corrected=fix.why,
            )
        assert fix.identity is not None
        if fix.record is None:
            return RowPlan(RowAction.NEW, look_up=look_up, identity=fix.identity, corrected=fix.why)
        # Its correction was recorded by an earlier run: as that record stands.
        plan = plan_row(
            fix.identity,
            request_of,
            known=fix.record,
            now=now,
            retention=retention,
            look_up=look_up,
            other_credentials=other_credentials,
            profile=profile,
            commands=commands,
            server_time=server_time,
        )
        return dataclasses.replace(plan, identity=fix.identity, corrected=fix.why)
    if same is not True:
        recorded = recorded_payload(record, request.key_field)
        if recorded is None:
            why = (
                "was submitted before with other content (its recorded body was not kept,"
                " so the old values cannot be shown: its fingerprint differs)"
            )
        else:
            why = "was submitted before with other content: " + "; ".join(
                differences(recorded, request.payload)
            )
        return RowPlan(RowAction.REFUSED, record, why=why)

    def old() -> bool:
        return past_retention(record, now=now, retention=retention, server=server_time(record))

    return _known(record, request, other_credentials(record), look_up, old, commands)


def _known(
    record: OperationRecord,
    request: Request,
    other_credentials: bool,
    look_up: bool,
    old: Callable[[], bool],
    commands: Commands | None = None,
) -> RowPlan:
    """What to do with a row the store holds with this content; `old()`: past the
    server's key retention, or of unknown age (`past_retention`), asked only where it
    decides."""
    moved = target_of(record.url) != target_of(request.url)
    elsewhere = origin_of(record.url) != origin_of(request.url)
    never_applied = not record.maybe_applied and record.lease_owner is None
    status = record.response.status_code if record.response is not None else None
    # Looked up before it is sent: its first send is to come, it may have been applied
    # (the server may have forgotten its key sooner than the retention says), or old.
    unsure = record.maybe_applied or record.state is State.IN_FLIGHT
    ask = look_up and (record.attempts == 0 or unsure or old())
    if record.state.finished:
        refused_for_target = (
            record.state is State.FAILED
            and never_applied
            and status in NEVER_APPLIED_STATUSES
            and (moved or other_credentials or status in _CREDENTIALS)
        )
        if refused_for_target:
            return RowPlan(
                RowAction.REOPEN,
                record,
                look_up=ask,
                why=f"refused with HTTP {status} at {_shown_target(record)}, never applied",
            )
        if elsewhere or other_credentials:
            where = (
                f"at {origin_of(record.url)}, not at {origin_of(request.url)}"
                if elsewhere
                else "with other credentials than this run's (another account, or a test key)"
            )
            why = f"was {_finished(record)} {where}"
            # Paid here with another token: most likely the wrong token now, and a store
            # of its own would pay the file again under that other account.
            advice = ELSEWHERE_ADVICE if elsewhere else OTHER_CREDENTIALS_ADVICE
            if look_up:
                return RowPlan(RowAction.ELSEWHERE, record, look_up=True, why=why, advice=advice)
            return RowPlan(RowAction.REFUSED, record, why=why, advice=advice)
        return RowPlan(RowAction.DONE, record)
    if moved or other_credentials:
        where = _shown_target(record) if moved else "with other credentials"
        if never_applied and record.state in (State.PENDING, State.NOT_SENT):
            return RowPlan(
                RowAction.REOPEN,
                record,
                look_up=ask,
                why=f"recorded for {where}, never applied there",
            )
        settle = (
            f"idemclient ops reconcile {record.operation_id}"
            if commands is None
            else commands.reconcile(record.operation_id, where=target_of(record.url))
        )
        return RowPlan(
            RowAction.REFUSED,
            record,
            why=(
                f"was sent {'to ' if moved else ''}{where} and may have been applied there"
                f" ({record.state.words}): finish it there (the same --url, --path and"
                f" token), or settle it with `{settle}` (the token it was sent with in"
                " IDEMCLIENT_TOKEN)"
            ),
        )
    return RowPlan(RowAction.KNOWN, record, look_up=ask)


#: What to do about a row finished at another origin than the one this run sends to.
ELSEWHERE_ADVICE = (
    "a store records each row as paid once, where it was paid (the origin, and the"
    " credentials): check --url first. To pay these rows at another server on purpose (a"
    " sandbox, then production), give that run a store of its own (--store): each row is"
    " then looked up there before it is sent"
)
#: What to do about a row finished at this origin with other credentials.
OTHER_CREDENTIALS_ADVICE = (
    "these rows were paid at this server with other credentials than this run's (another"
    " token: another account, or a test key): check the token (--token or"
    " IDEMCLIENT_TOKEN). Run with the token they were paid with, they are done. Do not"
    " run them from another store to get past this: under this token's account they"
    " would be paid a second time"
)


def _finished(record: OperationRecord) -> str:
    status = record.response.status_code if record.response is not None else None
    answer = f" (HTTP {status})" if status is not None else ""
    return ("paid" if record.state is State.SUCCEEDED else "refused") + answer


def _shown_target(record: OperationRecord) -> str:
    """Where a record was sent, for messages: its URL without the credentials' digest."""
    return target_of(record.url)
