"""The evidence an operation keeps (what was last seen of it), read and written.

Evidence is the one line a record keeps of what its last attempt came to (``HTTP 503
Service Unavailable``, ``ReadTimeout: ...``, ``interrupted by KeyboardInterrupt ...``);
a few decisions read it again (the status of its last answer, see `status_in`).
"""

from __future__ import annotations

import re

import httpx

__all__ = ["answer_evidence", "error_name", "interrupted_before_sending", "status_in"]

#: An answer's evidence by its status, where its transport gave no reason phrase (httpx
#: then looks the status's phrase up in an enum, at some cost, for every answer).
_BY_STATUS: dict[int, str] = {}


def answer_evidence(response: httpx.Response) -> str:
    """What an answer says, as evidence: ``HTTP 503 Service Unavailable``."""
    status = response.status_code
    if "reason_phrase" in response.extensions:  # the server's own words (HTTP/1.1)
        return f"HTTP {status} {response.reason_phrase}".rstrip()
    text = _BY_STATUS.get(status)
    if text is None:  # at most one for each status httpx can build a response with
        text = _BY_STATUS[status] = f"HTTP {status} {response.reason_phrase}".rstrip()
    return text


def interrupted_before_sending(error: BaseException, before: str) -> str:
    """The evidence of an operation whose call was cut short before it handed anything
    to the transport: that, and what was last seen before it, if anything was (never
    an earlier interruption's words, so repeated ones do not pile up; but what an
    earlier one kept as last seen stays: it may be an answer that decides whether the
    operation may be sent again, see `status_in`)."""
    text = f"interrupted by {type(error).__name__} before this call sent anything"
    seen = _seen_before(before)
    if seen:
        text += f"{_SEEN_BEFORE}{seen})"
    return text


#: How `interrupted_before_sending` keeps what was last seen before an interruption.
_SEEN_BEFORE = " (last seen before: "


def _seen_before(evidence: str) -> str:
    """What `evidence` says was last seen of the operation, past the interruptions
    that sent nothing (`interrupted_before_sending`): "" if nothing was."""
    if not evidence.startswith("interrupted by"):
        return evidence
    _, found, seen = evidence.partition(_SEEN_BEFORE)
    return seen[:-1] if found and seen.endswith(")") else ""


def error_name(error: BaseException) -> str:
    """An error's class by its full name, as OpenTelemetry's `error.type` wants it."""
    kind = type(error)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


_EVIDENCE_STATUS = re.compile(r"HTTP (\d{3})\b")


def status_in(evidence: str) -> int | None:
    """The status of the last answer an operation's evidence names (``HTTP 500 ...``),
    if it names one; calls cut short since, which sent nothing, change nothing of it."""
    found = _EVIDENCE_STATUS.match(_seen_before(evidence))
    return int(found.group(1)) if found else None
