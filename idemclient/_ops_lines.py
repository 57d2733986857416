"""How `idemclient ops` puts an operation in words: a time, a line of `ops list`, the
fields of `ops show`, and the JSON object of both."""

from __future__ import annotations

import datetime
import shutil
import sys
from typing import Any

from . import State
from ._cli_options import styled_state
from .store import OperationRecord

__all__ = ["LIST_WIDTH", "fields", "line_width", "listed", "record_json", "when"]


def record_json(record: OperationRecord) -> dict[str, Any]:
    response = record.response
    return {
        "operation_id": record.operation_id,
        "key": record.key,
        "state": record.state.value,
        "reference": record.reference,
        "method": record.method,
        "url": record.url,
        "attempts": record.attempts,
        "maybe_applied": record.maybe_applied,
        "evidence": record.evidence,
        "not_before": record.not_before,
        "lease_owner": record.lease_owner,
        "lease_expires": record.lease_expires,
        "lease_look_up": record.lease_look_up,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "finished_at": record.finished_at,
        "clock_stepped": record.clock_stepped,
        "sent_at": record.sent_at,
        "server_created_at": record.server_created_at,
        "server_sent_at": record.server_sent_at,
        "replay_unexplained": record.replay_unexplained,
        "status": None if response is None else response.status_code,
    }


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


#: A line of `ops list` outside a terminal is at most this wide.
LIST_WIDTH = 120


def line_width() -> int:
    """The width lines are cut to: the terminal's, or `LIST_WIDTH` outside one."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((LIST_WIDTH, 24)).columns
    return LIST_WIDTH


def listed(record: OperationRecord, width: int) -> str:
    """One operation on one line of at most `width` columns: its id whole (it is what
    `ops show` takes; a line with an id longer than that is only as long as it needs),
    then the evidence, cut."""
    state = f"{record.state.value:<13}"
    held = (
        f"  [being looked up until {when(record.lease_expires)}]"
        if record.lease_look_up and record.lease_owner
        else ""
    )
    reference = record.reference or ""
    shown = "" if not reference or reference in record.operation_id else f"  ref={reference}"
    head = (
        f"{record.operation_id}  {state} {record.attempts:>2} attempt(s)"
        f"  {when(record.updated_at)}{shown}{held}"
    )
    evidence = " ".join(record.evidence.split())
    room = width - len(head) - 2
    if evidence and room >= 10:
        if len(evidence) > room:
            evidence = evidence[: room - 1] + "…"
        tail = f"  {evidence}"
    else:
        tail = ""
    return head.replace(state, styled_state(record.state, 13), 1) + tail


def _lease(record: OperationRecord) -> str:
    """Who holds the operation, until when, and for what (a look-up sends nothing)."""
    if not record.lease_owner:
        return "-"
    held = f"{record.lease_owner} until {when(record.lease_expires)}"
    if record.lease_look_up:
        held += " (looking it up on the server: nothing is sent under this lease)"
    return held


def fields(record: OperationRecord) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [
        ("operation", record.operation_id),
        ("key", record.key),
        ("state", record.state.value),
        ("reference", record.reference or "-"),
        ("request", f"{record.method} {record.url}"),
        ("body", record.body.decode("utf-8", "replace")[:500]),
        ("attempts", record.attempts),
        ("maybe applied", record.maybe_applied),
        ("evidence", record.evidence or "-"),
        ("not before", when(record.not_before)),
        ("lease", _lease(record)),
        ("created", when(record.created_at)),
        ("updated", when(record.updated_at)),
        ("finished", when(record.finished_at)),
        ("last sent", when(record.sent_at)),
        ("created (server)", when(record.server_created_at)),
        ("last sent (server)", when(record.server_sent_at)),
    ]
    if record.clock_stepped is not None:
        rows.append(
            (
                "age unknown",
                f"a clock went back {record.clock_stepped:.0f}s while it was unfinished:"
                " it is looked up, never sent again on its age",
            )
        )
    if record.replay_unexplained:
        rows.append(
            (
                "replay unexplained",
                "an answer its profile reads as a replay came with no attempt of ours"
                " before it: another sender's payment, or the application's refusal;"
                + (
                    " a look-up found no payment, so it was the refusal (the status and"
                    " response below): never applied, never sent again"
                    if record.state is State.FAILED and not record.maybe_applied
                    else " only a look-up settles it"
                ),
            )
        )
    if record.response is not None:
        body = record.response.body.decode("utf-8", "replace")[:500]
        if record.response.body_omitted:
            body = (
                f"not kept: {record.response.body_size} bytes, sha256"
                f" {record.response.body_sha256} (over the store's max_stored_body, or"
                " reaped); re-issued, the operation says so, never an empty body"
            )
        rows += [("status", record.response.status_code), ("response", body)]
    return rows
