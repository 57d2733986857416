"""Settling an operation by looking it up on the server, without sending it again.

An operation that may have been applied but has no final answer cannot always be
resumed: the server may have forgotten its key (`ReconcileRequired`). The server still
knows its payments, though. A look-up by the operation's end-to-end reference (or by
its key, while the server keeps keys) says which it is:

- found: the payment exists; the operation is settled as succeeded, with the look-up's
  answer as its response;
- not found (404, or an empty list): it was never applied; the operation becomes
  `not_sent` and is no longer "maybe applied", so it may be sent again;
- anything else: still unknown; it stays as it was, for a person to settle.

The decisions are here; the clients do the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal
from urllib.parse import quote

import httpx

from ._errors import Indeterminate
from ._outcome import Outcome, State
from ._store import OperationRecord

__all__ = ["Finding", "default_found", "judge", "lookup_url"]

Finding = Literal["applied", "not_applied", "unknown"]


def lookup_url(template: str, record: OperationRecord) -> str:
    """`template` with `{key}` and `{reference}` filled in (URL-quoted)."""
    if "{reference}" in template and not record.reference:
        raise ValueError(
            f"operation {record.operation_id!r} has no end-to-end reference to look up;"
            " use a look-up by {key} instead"
        )
    try:
        return template.format(
            key=quote(record.key, safe=""), reference=quote(record.reference or "", safe="")
        )
    except (KeyError, IndexError) as exc:
        raise ValueError(
            f"look-up {template!r} may only use {{key}} and {{reference}}: {exc}"
        ) from None


def default_found(response: httpx.Response) -> bool:
    """A 2xx answer names the payment: a JSON object, or a list (`data`) with items."""
    try:
        body = json.loads(response.content or b"null")
    except ValueError:
        return bool(response.content)
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        return bool(body["data"])
    if isinstance(body, list):
        return bool(body)
    return bool(body)


def judge(response: httpx.Response, found: Callable[[httpx.Response], bool]) -> Finding:
    if response.status_code == 404:
        return "not_applied"
    if response.is_success:
        return "applied" if found(response) else "not_applied"
    return "unknown"


def unsettled(record: OperationRecord, evidence: str) -> Indeterminate:
    outcome = Outcome(
        operation_id=record.operation_id,
        key=record.key,
        state=record.state,
        attempts=record.attempts,
        evidence=evidence,
        not_before=record.not_before,
        maybe_applied=record.maybe_applied,
        from_store=True,
    )
    return Indeterminate(
        f"operation {record.operation_id!r} (key {record.key}) could not be settled by"
        f" looking it up: {evidence}. Settle it by hand against the server's records.",
        outcome,
    )


def settled(record: OperationRecord, response: httpx.Response | None) -> Outcome:
    return Outcome(
        operation_id=record.operation_id,
        key=record.key,
        state=record.state,
        attempts=record.attempts,
        response=response if record.state is State.SUCCEEDED else None,
        from_store=False,
        evidence=record.evidence,
        maybe_applied=record.maybe_applied,
        last_status=None if response is None else response.status_code,
    )
