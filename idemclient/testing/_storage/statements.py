"""The reference server's SQL, written once for both backends.

SQLite and PostgreSQL run the same statements for every phase, look-up and outbox
write; they differ only in how a statement is spelled: the database's `Dialect` (see
`_db.dialect`) says how a parameter is written, and each backend how its tables keep
what the server's own are:

- `time`: how a clock reading is written (SQLite keeps seconds as REAL, PostgreSQL
  a `timestamptz` made by `to_timestamp`);
- `epoch`: how a time column is read back as seconds (the same in reverse);
- `order`: the column that keeps insertion order (SQLite's `rowid`, an identity `seq`).

`Statements(dialect, ...)` renders every statement once, when a backend's module is
imported: each is a plain constant string after that, which both drivers' statement
caches key on, and nothing is assembled per request but `find_resources`' filters.

What only one backend does (SQLite's reaper, PostgreSQL's partitions and advisory
locks) stays in that backend's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..._db.dialect import Dialect

__all__ = ["Statements"]


# Templates: {p} a parameter, {t} a time parameter, {order} the insertion order, and
# the column lists below. Column lists are spelled out: every statement returns the
# columns its row type takes, in that order.
_KEY_COLUMNS = (
    "client, key, request_hash, endpoint, request_body, state, recovery_point, resource_id,"
    " response_code, response_body, {locked_at}, lease_owner, attempts, {last_attempt_at},"
    " {created_at}"
)
_RESOURCE_COLUMNS = (
    "id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,"
    " {created_at}"
)
# The outbox's times are the server clock's seconds as they are in both databases: a
# deliverer claims an event on the exact `next_attempt_at` it read.
_EVENT_COLUMNS = (
    "id, client, type, resource_id, body, created_at, state, attempts, posts, next_attempt_at,"
    " delivered_at, last_status, last_error"
)

_SELECT_KEY = "SELECT {keys} FROM idempotency_keys WHERE client = {p} AND key = {p}"
# No conflict target: on PostgreSQL the unique index is each day partition's own
# primary key, which it consults when none is named (a target would need one on the
# parent); on SQLite the primary key is the table's only unique constraint anyway.
_ADMIT = """
INSERT INTO idempotency_keys
  (client, key, request_hash, endpoint, request_body, state, locked_at, lease_owner, created_at)
VALUES ({p}, {p}, {p}, {p}, {p}, 'started', {t}, {p}, {t})
ON CONFLICT DO NOTHING
RETURNING {keys}
"""
# The seed's takeover: one conditional UPDATE, so of two racing resumers exactly one
# gets the row back (on PostgreSQL the second waits for the first's row lock,
# re-checks the condition on the new row version, and matches nothing).
_TAKE_OVER = """
UPDATE idempotency_keys SET locked_at = {t}, lease_owner = {p}
WHERE client = {p} AND key = {p} AND state = 'started'
  AND (locked_at IS NULL OR locked_at < {t})
RETURNING {keys}
"""
# Every phase write below matches only while `lease_owner` is still this attempt: no
# row back means the lease was lost, and the phase writes nothing.
_ADVANCE = """
UPDATE idempotency_keys SET recovery_point = {p}, locked_at = {t}
WHERE client = {p} AND key = {p} AND state = 'started' AND lease_owner = {p}
RETURNING resource_id
"""
_ADVANCE_H1 = """
UPDATE idempotency_keys SET recovery_point = {p}, locked_at = {t}, resource_id = {p}
WHERE client = {p} AND key = {p} AND state = 'started' AND lease_owner = {p}
RETURNING resource_id
"""
_MARK_SENT = """
UPDATE idempotency_keys
SET recovery_point = {p}, locked_at = {t}, attempts = attempts + 1, last_attempt_at = {t}
WHERE client = {p} AND key = {p} AND state = 'started' AND lease_owner = {p}
RETURNING resource_id
"""
_FINISH = """
UPDATE idempotency_keys
SET state = 'finished', response_code = {p}, response_body = {p}, locked_at = NULL,
    lease_owner = NULL
WHERE client = {p} AND key = {p} AND state = 'started' AND lease_owner = {p}
RETURNING resource_id
"""
_RELEASE = """
UPDATE idempotency_keys SET locked_at = NULL, lease_owner = NULL
WHERE client = {p} AND key = {p} AND state = 'started' AND lease_owner = {p}
RETURNING resource_id
"""
# A server profile's retention, on arrival: a finished key past it is forgotten.
_FORGET = """
DELETE FROM idempotency_keys
WHERE client = {p} AND key = {p} AND state = 'finished' AND created_at <= {t}
"""
# The recovery sweep, answered from the partial index on unfinished keys.
_STALE = """
SELECT client, key FROM idempotency_keys
WHERE state = 'started' AND (locked_at IS NULL OR locked_at < {t})
ORDER BY created_at LIMIT {p}
"""
_INSERT_RESOURCE = """
INSERT INTO resources
  (id, kind, client, idempotency_key, reference, amount, currency, status, fields, ext1, ext2,
  created_at)
VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, NULL, NULL, {t})
"""
_SELECT_RESOURCE = "SELECT {resources} FROM resources WHERE id = {p}"
_ALL_RESOURCES = "SELECT {resources} FROM resources ORDER BY {order}"
_SET_STATUS = "UPDATE resources SET status = {p} WHERE id = {p}"
_SET_EXT1 = "UPDATE resources SET ext1 = {p} WHERE id = {p}"
_SET_EXT2 = "UPDATE resources SET ext2 = {p} WHERE id = {p}"
_JOURNAL = "INSERT INTO journal (resource_id, step, at) VALUES ({p}, {p}, {t})"
_EXTERNAL_APPLY = """
INSERT INTO external_effects AS e
  (system, key, resource_id, outcome, reference, amount, applied_at, calls)
VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {t}, 1)
ON CONFLICT (system, key) DO UPDATE SET calls = e.calls + 1
RETURNING outcome, reference, calls
"""
_EXTERNAL_LOOKUP = (
    "SELECT outcome, reference, calls FROM external_effects WHERE system = {p} AND key = {p}"
)
# An external system forgets a key past its own retention: the row stays (the ledger
# still counts its effect on its resource) under a name no instruction will use again.
_EXTERNAL_FORGET = (
    "UPDATE external_effects SET key = {p} WHERE system = {p} AND key = {p} AND applied_at < {t}"
)
_INSERT_EVENT = (
    "INSERT INTO webhook_events (id, client, type, resource_id, body, created_at, state,"
    " next_attempt_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, 'pending', {p})"
)
_DUE_EVENTS = (
    "SELECT {events} FROM webhook_events WHERE state = 'pending' AND next_attempt_at <= {p}"
    " ORDER BY next_attempt_at, {order} LIMIT {p}"
)
# A claim moves the due time forward, conditional on the value just read: of two
# deliverers (in two server processes, say) that read the same event, one gets it; if
# the winner dies, the event is due again when the claim runs out (at least once,
# never never).
_CLAIM_EVENT = (
    "UPDATE webhook_events SET next_attempt_at = {p}"
    " WHERE id = {p} AND state = 'pending' AND next_attempt_at = {p}"
)
_POSTPONE_EVENT = (
    "UPDATE webhook_events SET next_attempt_at = {p} WHERE id = {p} AND state = 'pending'"
)
_EVENT_RESULT = (
    "UPDATE webhook_events SET state = {p}, attempts = attempts + 1, posts = posts + {p},"
    " next_attempt_at = {p}, delivered_at = {p}, last_status = {p}, last_error = {p}"
    " WHERE id = {p} AND state = 'pending'"
)
_ALL_EVENTS = "SELECT {events} FROM webhook_events ORDER BY created_at, {order}"
_LEDGER_KEYS = (
    "SELECT resource_id, state, recovery_point FROM idempotency_keys WHERE resource_id IS NOT NULL"
)
_LEDGER_EFFECTS = (
    "SELECT resource_id, system, count(*), sum(calls) FROM external_effects"
    " GROUP BY resource_id, system"
)
_LEDGER_JOURNAL = "SELECT resource_id, step FROM journal ORDER BY {order}"


class Statements:
    """Every shared statement, rendered for one `Dialect`: built once per backend, at
    import, and never changed (every attribute is `Final`)."""

    def __init__(self, dialect: Dialect, *, time: str, epoch: str, order: str) -> None:
        times = {
            column: epoch.format(column)
            for column in ("locked_at", "last_attempt_at", "created_at")
        }
        names = {
            "p": dialect.param,
            "t": time,
            "order": order,
            "keys": _KEY_COLUMNS.format(**times),
            "resources": _RESOURCE_COLUMNS.format(**times),
            "events": _EVENT_COLUMNS,
        }

        def render(template: str) -> str:
            return template.format(**names)

        self.dialect: Final = dialect
        #: a time column read back as seconds, with `{}` for the column
        self.epoch: Final = epoch
        self.order: Final = order
        self.resource_columns: Final = names["resources"]
        self.select_key: Final = render(_SELECT_KEY)
        self.admit: Final = render(_ADMIT)
        self.take_over: Final = render(_TAKE_OVER)
        self.advance: Final = render(_ADVANCE)
        self.advance_h1: Final = render(_ADVANCE_H1)
        self.mark_sent: Final = render(_MARK_SENT)
        self.finish: Final = render(_FINISH)
        self.release: Final = render(_RELEASE)
        self.forget: Final = render(_FORGET)
        self.stale: Final = render(_STALE)
        self.insert_resource: Final = render(_INSERT_RESOURCE)
        self.select_resource: Final = render(_SELECT_RESOURCE)
        self.all_resources: Final = render(_ALL_RESOURCES)
        self.set_status: Final = render(_SET_STATUS)
        # An external system's answer on the resource, by system number.
        self.set_external: Final = {1: render(_SET_EXT1), 2: render(_SET_EXT2)}
        self.journal: Final = render(_JOURNAL)
        self.external_apply: Final = render(_EXTERNAL_APPLY)
        self.external_lookup: Final = render(_EXTERNAL_LOOKUP)
        self.external_forget: Final = render(_EXTERNAL_FORGET)
        self.insert_event: Final = render(_INSERT_EVENT)
        self.due_events: Final = render(_DUE_EVENTS)
        self.claim_event: Final = render(_CLAIM_EVENT)
        self.postpone_event: Final = render(_POSTPONE_EVENT)
        self.event_result: Final = render(_EVENT_RESULT)
        self.all_events: Final = render(_ALL_EVENTS)
        self.ledger_keys: Final = render(_LEDGER_KEYS)
        self.ledger_effects: Final = render(_LEDGER_EFFECTS)
        self.ledger_journal: Final = render(_LEDGER_JOURNAL)

    def find_resources(self, filters: Sequence[str]) -> str:
        """A client's resources of one kind, with `column = value` for each column in
        `filters`. Only the filters given go into the statement, so each variant is
        planned for the index it can use; the values are parameters."""
        p = self.dialect.param
        where = " AND ".join([f"client = {p}", f"kind = {p}", *(f"{c} = {p}" for c in filters)])
        return f"SELECT {self.resource_columns} FROM resources WHERE {where} ORDER BY {self.order}"
