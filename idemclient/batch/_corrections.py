"""A row refused, or never sent, then corrected in the file: sent again with its corrected
content, automatically; never a row that was (or may have been) applied.

A known reference with other content is refused (`_plan`): it may be a second payment
under the first one's name. But a row nothing of which can have been applied is no
payment yet, and its correction is the operator's fix, not a second payment:

- recorded and never sent (`pending`), or sent where nothing reached the server
  (`not_sent`), or refused for where it went or with what credentials (401, 404, 405,
  407), never maybe applied, held by nobody: the server never kept an answer under its
  key, so the corrected content is sent under the same key (the record is pointed at it:
  `Store.reopen`), which is also the key another machine's empty store gives the row;
- refused with a final 4xx that cannot have been applied (a 400 "these fields are set
  by the server", a 402 a 403...; not a 408, 409, 422, 425 or 429, nor an answer the
  profile reads as "this key was used for another request", "still running" or "busy"),
  never maybe applied: a server that keeps refusals under their key (Stripe, the IETF
  draft, the reference server: `replays_errors`) answers that key with the old refusal
  whatever the body, or calls the new body a key reused, so the corrected content needs
  a key of its own. It is derived from the refused record's key and the corrected
  content (`derive_key(old key, "corrected:" + digest)`): the same on every store that
  saw that refusal and that correction, and another for each correction. Its record is
  the row's operation id and ``#corrected-`` and the content's digest, with the row's
  reference, so that a rerun of the same corrected file finds it (and answers from it),
  and a rerun of another correction finds every earlier one.

A corrected row is looked up by its reference before it is sent (look-ups on): a store
that never saw the refusal (another machine's, empty) gives the corrected content the
row's first key, and may have paid it under that key; the look-up finds that payment
and the row is recorded, not sent. Once any correction of a row was sent (or may have
been), every other content of it is refused again: a reference is paid once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .. import State
from .._seam import NEVER_APPLIED_STATUSES, codes_in
from ..keys import derive_key
from ..profiles import Profile
from ..store import OperationRecord
from ._identity import RowIdentity
from ._report_row import refusal_of

__all__ = [
    "CORRECTED_MARK",
    "Correction",
    "content_digest",
    "corrected_identity",
    "correcting",
]

#: Between a row's operation id and its corrected content's digest, in the operation
#: id of a correction sent under a key of its own.
CORRECTED_MARK = "#corrected-"
#: 4xx answers that are no final refusal of the request: a timeout, "still running",
#: "this key was used for another request", "too early", "too many".
_NOT_A_REFUSAL = frozenset({408, 409, 422, 425, 429})


@dataclass(frozen=True, slots=True)
class Correction:
    """How a row's corrected content is sent."""

    #: in words, for the report: what was wrong before, and what is done now
    why: str
    #: sent under the record's own key (the record pointed at the corrected content)
    reopen: bool = False
    #: else, the corrected content's identity (a key of its own), and its record if a
    #: run made one already
    identity: RowIdentity | None = None
    record: OperationRecord | None = None


def content_digest(payload: Mapping[str, Any]) -> str:
    """A digest of a row's content, whatever the order of its columns."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def corrected_identity(identity: RowIdentity, refused_key: str, digest: str) -> RowIdentity:
    """The identity of a row's corrected content, sent under a key of its own."""
    return dataclasses.replace(
        identity,
        key=derive_key(refused_key, f"corrected:{digest}"),
        variant=f"{CORRECTED_MARK}{digest[:16]}",
    )


def _never_applied_unsent(record: OperationRecord) -> bool:
    """Nothing of it reached the server, or what did was refused for its target or its
    credentials: the server keeps nothing under its key."""
    if record.maybe_applied or record.lease_owner is not None:
        return False
    if record.state in (State.PENDING, State.NOT_SENT):
        return True
    status = record.response.status_code if record.response is not None else None
    return record.state is State.FAILED and status in NEVER_APPLIED_STATUSES


def refused(record: OperationRecord, profile: Profile) -> bool:
    """A final 4xx refusal of the request itself, of which nothing was applied; or a
    payment the profile's server declined in a 2xx (Adyen's `resultCode` `Refused`)."""
    response = record.response
    if record.state is not State.FAILED or record.maybe_applied or record.replay_unexplained:
        return False
    if response is None:
        return False
    status = response.status_code
    headers = httpx.Headers(list(response.headers))
    codes = codes_in(response.body, profile.code_paths)
    if 200 <= status < 300:
        return any(match.matches(status, headers, codes) for match in profile.declined)
    if not 400 <= status < 500 or status in _NOT_A_REFUSAL:
        return False
    keyed = (*profile.mismatch, *profile.in_progress, *profile.throttled)
    return not any(match.matches(status, headers, codes) for match in keyed)


def correcting(
    profile: Profile,
    corrections_of: Callable[[RowIdentity], Sequence[OperationRecord]],
) -> Callable[[RowIdentity, OperationRecord, Mapping[str, Any]], Correction | str | None]:
    """The judge of a known row's other content under `profile`: a `Correction`, a
    refusal (its why), or None (not a correction: refused as other content).
    `corrections_of(identity)` reads the store's corrections of a row (asked only for a
    row whose content changed after a refusal)."""

    def correct(
        identity: RowIdentity, record: OperationRecord, payload: Mapping[str, Any]
    ) -> Correction | str | None:
        if _never_applied_unsent(record):
            return Correction(
                f"{_before(record)}, never applied; its content corrected in the file since:"
                " sent under its key",
                reopen=True,
            )
        if not refused(record, profile):
            return None
        digest = content_digest(payload)
        mine = corrected_identity(identity, record.key, digest)
        found = corrections_of(identity)
        this = [r for r in found if r.operation_id == mine.operation_id]
        others = [r for r in found if r.operation_id != mine.operation_id]
        sent = [r for r in others if not (refused(r, profile) or _never_applied_unsent(r))]
        if sent:
            return (
                f"was refused (HTTP {_status(record)}), then sent with other corrected"
                f" content ({sent[0].operation_id}, {sent[0].state.words}): a reference is"
                " paid once; submit that content again, or give this payment a new"
                " reference"
            )
        pending = [r for r in others if _never_applied_unsent(r)]
        if pending:
            return (
                f"was refused (HTTP {_status(record)}), then recorded with other corrected"
                f" content not sent yet ({pending[0].operation_id}): submit that content"
                " to finish it, or settle it first"
            )
        return Correction(
            f"{_before(record)}; its content corrected in the file since: sent under a new"
            " key (the server may keep its refusal under the old one)",
            identity=mine,
            record=this[0] if this else None,
        )

    return correct


def _status(record: OperationRecord) -> int | None:
    return record.response.status_code if record.response is not None else None


def _before(record: OperationRecord) -> str:
    status = _status(record)
    if record.state is State.FAILED:
        said = refusal_of(record.response.body if record.response is not None else None)
        return f"refused in an earlier run (HTTP {status}{f': {said}' if said else ''})"
    return f"recorded in an earlier run, {record.state.words}"
