"""A batch's rows as a run works on them: where each one is between the phases (`At`,
one byte a row), a row with its identity and plan (`RunRow`), where rows are sent and
looked up (`Target`), and what the run counts for its report (`RunCounts`)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from ..store import Intent, OperationRecord
from ._identity import RowIdentity
from ._lookup import Asked, LookupSettings
from ._plan import RowAction, RowPlan
from ._rows import PayoutRow

__all__ = [
    "CHUNK",
    "KNOWN_CODES",
    "NEW_CODES",
    "NEW_PLAN",
    "SENDING",
    "At",
    "RunCounts",
    "RunRow",
    "Target",
    "new_code",
    "recorded_intent",
    "start_of",
]


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how rows are sent and looked up."""

    path: str
    operation: str
    namespace: uuid.UUID
    lookup: LookupSettings | None
    #: rows whose very content (`_duplicates`), or payment (`_resave`), the store holds
    #: under another reference are new payments, not refused or held: every row (True),
    #: or those of these references (as the file has them, in NFC)
    new_payments: bool | frozenset[str] = False

    def is_new_payment(self, item: RunRow) -> bool:
        """The operator says this row is a new payment, whatever the store holds."""
        named = self.new_payments
        return named is True or (not isinstance(named, bool) and item.identity.bare in named)


@dataclass(slots=True)
class RunRow:
    """One row as the run works on it. Its request (payload and body) is made again
    when needed rather than kept: a hundred thousand rows hold their rows once."""

    index: int
    row: PayoutRow
    identity: RowIdentity
    plan: RowPlan
    #: the look-up's finding, when it was looked up
    asked: Asked | None = None
    #: what it is sent as (method POST): None until it is known to be sent
    outgoing: Intent | None = None
    #: it was pointed at this run's URL (the reason, in words)
    reopened: str = ""


@dataclass
class RunCounts:
    found: int = 0
    found_unsettled: int = 0
    reopened: int = 0
    #: refused or never sent before, their content corrected in the file since: sent
    corrected: int = 0
    budget: int = 0
    not_started: int = 0
    looked_up: int = 0
    #: not asked again: an earlier run's "nothing found", kept and believed
    remembered: int = 0
    #: rows left unsettled while the server asked them to wait (Retry-After)
    waited: int = 0
    waited_not_sent: int = 0
    #: the longest such wait (seconds), and when the last of them ends
    longest_wait: float = 0.0
    wait_until: float = 0.0


#: Rows are planned, looked up, recorded and sent a chunk at a time: a run holds one
#: chunk of rows at a time (and one report line a row, on disk: `_lines`), however
#: long the file.
CHUNK = 1_000


class At(enum.IntEnum):
    """Where a row is in the run: one byte a row (`RunState.status`), what the run keeps of
    it between its phases. The rest (its identity, what the store knows of it) is made
    again from the file and the store, a chunk at a time, when a phase needs it."""

    #: not planned yet (a run stopped while planning)
    UNPLANNED = 0
    #: its report line is written
    DONE = 1
    #: refused: the batch is refused
    REFUSED = 2
    #: to be looked up on the server before anything is sent
    ASK = 3
    #: to be looked up, and an earlier run kept a "nothing found" for it: judged once
    #: the server's time is known (`_remembered`)
    KEPT = 4
    #: new to the store: registered, then sent under its key
    NEW = 5
    #: known to the store: sent under its recorded key
    KNOWN = 6
    #: never applied at another URL or with other credentials: pointed at this run's,
    #: then sent under its key
    REOPEN = 7
    #: pointed at this run's URL: sent under its key (its record says why)
    REOPENED = 8
    #: refused or never sent before, its content corrected since, and new to the store
    #: under an identity of its own (`_corrections`): registered, then sent under it
    CORRECTION = 9


SENDING = frozenset({At.NEW, At.KNOWN, At.REOPENED, At.CORRECTION})


#: Where a row planned new to the store may be, before anything is recorded.
NEW_CODES = (At.ASK, At.NEW, At.CORRECTION)


#: Rows sent as the store holds them now (planned again to know it).
KNOWN_CODES = (At.KNOWN, At.REOPENED, At.CORRECTION)


NEW_PLAN = RowPlan(RowAction.NEW)


def start_of(plan: RowPlan) -> At:
    """Where a row planned so starts (a row done or refused is dealt with at once)."""
    if plan.look_up:
        return At.ASK
    if plan.decision is RowAction.NEW:
        return new_code(plan)
    return {RowAction.KNOWN: At.KNOWN, RowAction.REOPEN: At.REOPEN}[plan.decision]


def new_code(plan: RowPlan) -> At:
    """Where a row new to the store goes: registered under its own identity, or under
    its corrected content's (`_corrections`)."""
    return At.CORRECTION if plan.identity is not None else At.NEW


def recorded_intent(record: OperationRecord) -> Intent:
    """A recorded operation as the intent it is sent again as: its own request."""
    return Intent(
        operation_id=record.operation_id,
        key=record.key,
        key_given=True,
        method=record.method,
        url=record.url,
        headers=record.headers,
        body=record.body,
        fingerprint=record.fingerprint,
        reference=record.reference,
        profile=record.profile,
    )
