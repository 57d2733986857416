"""Settling an operation by looking it up on the server, without sending it again.

An operation that may have been applied but has no final answer cannot always be
resumed: the server may have forgotten its key (`ReconcileRequired`). The server still
knows its payments, though. A look-up by the operation's end-to-end reference (or by
its key, while the server keeps keys) says which it is. Three steps, a module each:

- `templates`: the look-up's URL, a template filled in with the operation's key or
  reference, each value quoted for where it stands;
- `judgement`: what the look-up's answer says (found, and what it came to; not found;
  ambiguous; unknown), pure;
- `settling`: what that verdict does to the stored operation, under a look-up's lease.

The names below are the package's face: the clients, the batch and the operator's
commands use them from here.
"""

from .judgement import (
    DEFAULT_RULES,
    DEFAULT_STATUSES,
    Finding,
    Item,
    LookupRules,
    Verdict,
    default_found,
    judge,
    judge_created,
    judge_found,
    judge_resource,
    listed,
    status_of,
)
from .settling import (
    Taken,
    answered_at,
    apply,
    kept_payment,
    last_sent,
    refused,
    release,
    settle_found,
    settled,
    still_in_flight,
    take,
    too_early,
    unsettled,
)
from .templates import (
    Unquotable,
    by_reference_alone,
    carried,
    fill,
    lookup_url,
    quoting_of,
    search_string,
)

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_STATUSES",
    "Finding",
    "Item",
    "LookupRules",
    "Taken",
    "Unquotable",
    "Verdict",
    "answered_at",
    "apply",
    "by_reference_alone",
    "carried",
    "default_found",
    "fill",
    "judge",
    "judge_created",
    "judge_found",
    "judge_resource",
    "kept_payment",
    "last_sent",
    "listed",
    "lookup_url",
    "quoting_of",
    "refused",
    "release",
    "search_string",
    "settle_found",
    "settled",
    "status_of",
    "still_in_flight",
    "take",
    "too_early",
    "unsettled",
]
