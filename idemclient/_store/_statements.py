"""The stores' SQL, written once for SQLite and PostgreSQL.

Both backends run the same statements for every write and look-up of an operation;
they differ only in how a statement is spelled, which the database's `Dialect` says
(see `_db.dialect`: placeholders, NULL-safe equality, list parameters, row locks...),
and in the store's own names:

- `table`: the operations table (PostgreSQL's lives in the store's own schema);
- `order`: the order operations are listed in (PostgreSQL adds `seq`, which orders the
  rows of one batch, all created in the same instant);
- `clock_table`: the store's clock table (its high-water mark);
- `not_found_table`: the look-ups kept that found nothing (`Store.remember_not_found`);
- `contents_table`: the digests of operations' contents (`Store.note_contents`).

`Statements(dialect, ...)` renders every statement once, when a store is made (SQLite's at
import; PostgreSQL's per store, since the schema is the store's): each is a plain
constant string after that, which both drivers' statement caches key on, and nothing
is assembled per call.
"""

from __future__ import annotations

from typing import Final

from .._db.dialect import Dialect
from ._guards import (
    sql_attempted,
    sql_claimed,
    sql_claimed_state,
    sql_final_answer,
    sql_found_applied,
    sql_learns_over,
    sql_learnt_state,
    sql_reopenable,
    sql_settled,
)
from ._rows import COLUMNS, REQUEST_COLUMNS

__all__ = ["INSERT_COLUMNS", "Statements"]


#: The columns an admission writes, in the order of `admission_values`; the others
#: take their defaults (no attempts, not maybe applied, no evidence).
INSERT_COLUMNS = (
    "id, key, method, url, headers, body, fingerprint, reference, state, lease_owner,"
    " lease_expires, created_at, updated_at, profile, server_created_at"
)

# Templates: {t} the table, {p} a parameter, {j} a headers parameter, {c} every column
# (in the order `record_from_row` reads them), and the dialect's other words.
_SELECT = "SELECT {c} FROM {t}"
# Admission in one statement per intent: a row written means its caller owns the
# operation. No conflict target: the id and the key are both unique, and either
# conflicting means the operation (or its key) exists.
_ADMIT = (
    "INSERT INTO {t} ({insert}) VALUES ({p}, {p}, {p}, {p}, {j}, {p}, {p}, {p}, {p}, {p}, {p},"
    " {p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING"
)
# The row that answers for an intent: the one with its id, else the one with its key.
_FIND_FOR = _SELECT + " WHERE id = {p} OR key = {p} ORDER BY id = {p} DESC LIMIT 1"
# Every row a set of intents could conflict with, by id or by key.
_EXISTING = _SELECT + " WHERE id {any} OR key {any}"
# The takeover is conditional on the holder just read: one guarded write, so of two
# takers exactly one matches (on PostgreSQL, under READ COMMITTED, the second waits for
# the first's row lock, re-checks the condition on the new row and matches nothing).
# Taking over an operation that was in flight means its last owner may have sent it and
# died, or be slow, before it could say so: the operation may have been applied.
# An owner that was in flight may have sent until it died or its lease ran out, the
# earlier of its lease's end and now (the caller's {p}): `sent_at` keeps the latest.
# A look-up's lease is not in flight (it keeps the operation's state), so a takeover
# of it counts no send. The state is the table's (`_guards`): a sender's claim (the
# first {p}) makes it in flight; a look-up's keeps it, except that one taken from an
# owner in flight is indeterminate (maybe applied); both only where the table lets a
# claim happen. Every SET reads the row as it was before this statement.
# The server's time (the taker's, by its Date, if it knows it) goes beside the two
# stamps it can bound: a registered row never claimed has not been sent, so the time
# now is at or before its first send; an owner in flight sent at the latest now, so the
# time now is at or after it (NULL if unknown: the hold is judged from sent_at alone).
_TAKE_OVER = (
    "UPDATE {t} SET state = " + sql_claimed_state("{p}") + ","
    " lease_owner = {p}, lease_expires = {p}, lease_look_up = {p}, updated_at = {p},"
    " maybe_applied = maybe_applied OR state = {p},"
    " sent_at = {greatest}(coalesce(sent_at, {p}), coalesce({p}, sent_at)),"
    " server_created_at = CASE WHEN server_created_at IS NULL AND state = {p} THEN {p}"
    " ELSE server_created_at END,"
    " server_sent_at = CASE WHEN {p} THEN {p} ELSE server_sent_at END"
    " WHERE id = {p} AND " + sql_claimed() + " AND lease_owner {same} {p} RETURNING {c}"
)
# Guarded by the holder just read, as a takeover is: a move never races a sender.
_MOVE = (
    "UPDATE {t} SET url = {p}, updated_at = {p}"
    " WHERE id = {p} AND finished_at IS NULL AND lease_owner {same} {p} RETURNING {c}"
)
_RECORD_ATTEMPT = (
    "UPDATE {t} SET attempts = {p}, maybe_applied = maybe_applied OR {p}, evidence = {p},"
    " not_before = {p}, lease_expires = {p}, updated_at = {p},"
    " sent_at = {greatest}(coalesce(sent_at, {p}), coalesce({p}, sent_at)),"
    " server_sent_at = CASE {p} WHEN 1 THEN {greatest}(coalesce(server_sent_at, {p}), {p})"
    " WHEN 2 THEN NULL ELSE server_sent_at END,"
    " replay_unexplained = replay_unexplained OR {p}"
    " WHERE id = {p} AND lease_owner = {p} AND " + sql_attempted()
)
# "Maybe applied" is knowledge: whoever learnt it, the row keeps it, and an unsettled
# operation that may have been applied is indeterminate, never not sent. So the state
# is chosen here, from the row as well as from the caller: {p} is the caller's
# maybe-applied, then the state to write if it (or the row) says so, then the state.
# A success written over a refusal stored first keeps that refusal in its evidence
# (another caller was told it), after its own; the attempts counted are the most either
# caller saw.
# The answer's columns are written by a final finish, and by an unsettled one that
# keeps an answer (a replay no attempt of ours explains: if a look-up finds nothing,
# it was the application's refusal, and the operation's final answer); an unsettled
# finish with none leaves them as they are (`{answer}` is then empty).
_FINISH = (
    "UPDATE {t} SET state = CASE WHEN maybe_applied OR {p} THEN {p} ELSE {p} END,"
    " attempts = {greatest}(attempts, {p}), maybe_applied = maybe_applied OR {p},"
    " evidence = CASE WHEN finished_at IS NULL THEN {p} ELSE {p} || ({p} || evidence) END,"
    " not_before = {p}, lease_owner = NULL, lease_expires = NULL,"
    " lease_look_up = false, {answer}updated_at = {p}, finished_at = {p},"
    " sent_at = {greatest}(coalesce(sent_at, {p}), coalesce({p}, sent_at)),"
    " server_sent_at = CASE {p} WHEN 1 THEN {greatest}(coalesce(server_sent_at, {p}), {p})"
    " WHEN 2 THEN NULL ELSE server_sent_at END,"
    " replay_unexplained = replay_unexplained OR {p}"
    " WHERE id = {p} AND "
)
_ANSWER = (
    "status_code = {p}, response_headers = {j}, response_body = {p}, response_sha256 = {p},"
    " response_size = {p}, "
)
# A final answer is recorded whoever holds the lease: the server answers the same
# under this key to everyone; a success over a refusal stored first too, and a refusal
# not over an operation that may have been applied unless its caller knew that (the last
# three {p}: the state written, what the caller knew, the state again: the table's rule
# and the conditions beside it, `_guards`). Giving up only counts while the
# caller owns it: the owner's lease is the guard (a sender's stop, or a look-up giving
# its lease back with the state it found, which is no event of the table: the state is
# the caller's).
_FINAL_ANSWER = sql_final_answer()
_WHILE_OWNED = "lease_owner = {p}"
# A caller that lost its lease still leaves what it learnt: that its own attempts may
# have been applied (where the table lets that change the state, `_guards`); over a
# refusal another caller stored before this caller's attempt was sent, that refusal no
# longer settles the operation: unfinished again, the refusal named in its evidence.
# The caller's maybe-applied, whether it sent and its send, the words added, its
# maybe-applied again, then the attempts it saw, the time, its send twice, the
# operation, and whether it sent and its send again.
_MERGE = (
    "UPDATE {t} SET state = " + sql_learnt_state("maybe_applied OR {p}", "{p}", "{p}") + ","
    " evidence = CASE WHEN finished_at IS NULL THEN evidence ELSE evidence || {p} END,"
    " finished_at = NULL,"
    " maybe_applied = maybe_applied OR {p},"
    " attempts = CASE WHEN attempts < {p} THEN {p} ELSE attempts END, updated_at = {p},"
    " sent_at = {greatest}(coalesce(sent_at, {p}), coalesce({p}, sent_at)),"
    " server_sent_at = CASE {p} WHEN 1 THEN {greatest}(coalesce(server_sent_at, {p}), {p})"
    " WHEN 2 THEN NULL ELSE server_sent_at END,"
    " replay_unexplained = replay_unexplained OR {p}"
    " WHERE id = {p} AND (finished_at IS NULL OR " + sql_learns_over("{p}", "{p}") + ")"
)
# A look-up's finding, by the lease's holder: that the payment was made lands over a
# refusal stored first too (`_guards`), the others only on an unfinished row.
_SETTLE = (
    "UPDATE {t} SET {sets}, evidence = {p}, not_before = NULL, lease_owner = NULL,"
    " lease_expires = NULL, lease_look_up = false, updated_at = {p}"
    " WHERE id = {p} AND {where} AND lease_owner = {p}{also} RETURNING {c}"
)
_APPLIED = (
    "state = {p}, status_code = {p}, response_headers = {j}, response_body = {p},"
    " response_sha256 = {p}, response_size = {p}, finished_at = {p}"
)
_NOT_APPLIED = "state = {p}, maybe_applied = false"
# Refused, never applied: final, with the answer the row already keeps (the refusal
# itself), so only a row that keeps one (a finished operation always has an answer).
_REFUSED = "state = {p}, maybe_applied = false, finished_at = {p}"
_KEEPS_ANSWER = " AND status_code IS NOT NULL"
# Reaping forgets what an old finished operation said, never that it happened: the
# request's and the answer's bodies go (personal data, and most of a row's size); the
# id, key, fingerprint, reference, state and status stay, with the answer's size and
# sha256, so that the operation is never sent again under another key. Only an
# operator's purge deletes rows.
_REAP = (
    "UPDATE {t} SET body = {p}, response_body = {p}, reaped_at = {p} WHERE id IN"
    " (SELECT id FROM {t} WHERE finished_at IS NOT NULL AND reaped_at IS NULL"
    " AND finished_at < {p} LIMIT {p}{skip_locked})"
)
# The latest time the store has seen: the high-water mark kept in its clock table, and
# the newest time in its rows: a finished one's end, an unfinished one's intent, and an
# unfinished one's latest send, which may come long after its intent (a retry after the
# server's wait, a resume, a takeover). Each is read through its partial index, so a
# start costs the same in a store of millions of rows. A reaped row's end is not read
# (no index holds it): it is older than the mark, which the start that reaped it raised
# to its clock, at least the key retention past that end.
_SEEN = (
    "SELECT {greatest}("
    "coalesce((SELECT high_water FROM {clock}), 0),"
    " coalesce((SELECT max(finished_at) FROM {t}"
    " WHERE finished_at IS NOT NULL AND reaped_at IS NULL), 0),"
    " coalesce((SELECT max(created_at) FROM {t} WHERE finished_at IS NULL), 0),"
    " coalesce((SELECT max(sent_at) FROM {t}"
    " WHERE finished_at IS NULL AND sent_at IS NOT NULL), 0))"
)
_ADVANCE = "UPDATE {clock} SET high_water = {greatest}(high_water, {p})"
# A clock went back: every unfinished operation keeps the largest step seen (one not
# sent yet may be sent, and applied, before it looks its age again), and a server's
# wait, written by the clock ahead by that step, comes back by it. The last send comes
# back only to now, never earlier: which clock wrote it is not known (a send by a clock
# that was right, before a host ahead raised the store's time, is as old as it says),
# and one older than it was would let a look-up's "none" count too early.
_STEPPED_BACK = (
    "UPDATE {t} SET clock_stepped = {greatest}(coalesce(clock_stepped, 0), {p}),"
    " not_before = not_before - {p},"
    " sent_at = CASE WHEN sent_at > {p} THEN {p} ELSE sent_at END WHERE finished_at IS NULL"
)
# ... and the store's high-water mark comes back to the clock's time: it was set by the
# clock ahead, and every later start would see the same step again, and mark again what
# a right clock recorded since.
_REWIND = "UPDATE {clock} SET high_water = CASE WHEN high_water > {p} THEN {p} ELSE high_water END"
_PURGEABLE = "SELECT id, state FROM {t} WHERE id {any}{lock}"
_PURGE = "DELETE FROM {t} WHERE id {any}"
# Answered from the partial index on unfinished operations.
_UNFINISHED = _SELECT + " WHERE finished_at IS NULL ORDER BY {order} LIMIT {p}"
# An operation's id, and its reference, begin with the prefixes given (lengths first; an
# empty prefix lets every row through, a row without a reference only then).
_PREFIXES = "substr(id, 1, {p}) = {p} AND coalesce(substr(reference, 1, {p}), '') = {p}"
_OPERATIONS = _SELECT + " WHERE " + _PREFIXES + " ORDER BY {order} LIMIT {p}"
_OPERATIONS_IN = _SELECT + " WHERE state {any} AND " + _PREFIXES + " ORDER BY {order} LIMIT {p}"
_COUNTS = "SELECT state, count(*) FROM {t} WHERE " + _PREFIXES + " GROUP BY state"
# Records known by id, or by end-to-end reference (the reference's own partial index).
_FIND_IDS = _SELECT + " WHERE id {any}"
_FIND_REFERENCES = _SELECT + " WHERE reference {any}"
# Whether the store holds any reference at all (the reference's index, one entry).
_ANY_REFERENCE = "SELECT 1 FROM {t} WHERE reference IS NOT NULL LIMIT 1"
# The requests of the records whose reference is one of a list, or ends with "/" and
# one of it: the same reference in any scope ("<scope>/<reference>", a scope may hold
# "/" too). One pass over the references (the reference's index), each cut after every
# "/" in turn and matched against the list at once; only the request's columns are read
# (`REQUEST_COLUMNS`), for a caller that compares many.
_FIND_TAIL_REQUESTS = (
    "WITH RECURSIVE tails(reference, tail) AS ("
    "SELECT reference, reference FROM {t} WHERE reference IS NOT NULL"
    " UNION ALL SELECT reference, substr(tail, {strpos}(tail, '/') + 1) FROM tails"
    " WHERE {strpos}(tail, '/') > 0)"
    " SELECT {request} FROM {t} WHERE reference IN"
    " (SELECT reference FROM tails WHERE tail {any})"
)
# A page of the references the store holds, with their operations' ids, in order after
# a given (reference, id): the reference's own partial index, read once through.
_REFERENCES_FROM = (
    "SELECT reference, id FROM {t} WHERE reference IS NOT NULL AND (reference > {p}"
    " OR (reference = {p} AND id > {p})) ORDER BY reference, id LIMIT {p}"
)
_REFERENCES_FIRST = (
    "SELECT reference, id FROM {t} WHERE reference IS NOT NULL ORDER BY reference, id LIMIT {p}"
)
# A payment a look-up found on the server, recorded already settled: one write, so that
# no crash leaves it half recorded (see `Store.record_settled`). The columns of an
# admission, then the evidence and the answer; never leased, never attempted.
_RECORD_SETTLED = (
    "INSERT INTO {t} ({insert}, evidence, status_code, response_headers, response_body,"
    " response_sha256, response_size, finished_at) VALUES ({p}, {p}, {p}, {p}, {j}, {p}, {p},"
    " {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {j}, {p}, {p}, {p}, {p})"
    " ON CONFLICT DO NOTHING"
)
# A request that was never applied, pointed at a corrected target under its own key:
# only while nothing says it may have been applied and nobody holds it, and only from
# a state the table lets a correction reopen (`_guards`; see `Store.reopen`).
_REOPEN = (
    "UPDATE {t} SET url = {p}, headers = {j}, body = {p}, fingerprint = {p}, state = {p},"
    " evidence = {p}, not_before = NULL, status_code = NULL, response_headers = NULL,"
    " response_body = NULL, response_sha256 = NULL, response_size = NULL, updated_at = {p},"
    " finished_at = NULL WHERE id = {p} AND key = {p} AND maybe_applied = false"
    " AND lease_owner IS NULL AND " + sql_reopenable() + " RETURNING {c}"
)


# Look-ups that found nothing: one per operation, the latest kept.
_NOT_FOUND_COLUMNS = "operation_id, key, url, reading, asked_at, server_at"
_REMEMBER_NOT_FOUND = (
    "INSERT INTO {nf} (" + _NOT_FOUND_COLUMNS + ") VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
    " ON CONFLICT (operation_id) DO UPDATE SET key = excluded.key, url = excluded.url,"
    " reading = excluded.reading, asked_at = excluded.asked_at, server_at = excluded.server_at"
)
_NOT_FOUND = "SELECT " + _NOT_FOUND_COLUMNS + " FROM {nf} WHERE operation_id {any}"
_FORGET_NOT_FOUND_BEFORE = "DELETE FROM {nf} WHERE asked_at < {p}"
_FORGET_NOT_FOUND = "DELETE FROM {nf}"
_FORGET_NOT_FOUND_OF = "DELETE FROM {nf} WHERE operation_id {any}"
# The digest of an operation's content, kept (or replaced: a request reopened with a
# corrected body) beside it; found again by digest, for operations still there.
_NOTE_CONTENT = (
    "INSERT INTO {ct} (operation_id, digest) VALUES ({p}, {p})"
    " ON CONFLICT (operation_id) DO UPDATE SET digest = excluded.digest"
)
_FIND_CONTENTS = (
    "SELECT c.digest, c.operation_id FROM {ct} c JOIN {t} o ON o.id = c.operation_id"
    " WHERE c.digest {any}"
)
# The requests of operations whose id begins with a prefix and that have no digest yet
# (recorded by an earlier version, or by a process killed between two writes), in the
# order of their ids from after one (the primary key's index): a page at a time, each
# read once.
_UNDIGESTED = (
    "SELECT {request} FROM {t} WHERE id > {p} AND substr(id, 1, {p}) = {p} AND NOT EXISTS"
    " (SELECT 1 FROM {ct} c WHERE c.operation_id = {t}.id) ORDER BY id LIMIT {p}"
)
_FORGET_CONTENTS_OF = "DELETE FROM {ct} WHERE operation_id {any}"


class Statements:
    """Every shared statement, rendered for one `Dialect`: built once, never changed
    (every attribute is `Final`)."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        table: str,
        order: str,
        clock_table: str,
        not_found_table: str,
        contents_table: str,
    ) -> None:
        names = {
            "nf": not_found_table,
            "ct": contents_table,
            "t": table,
            "p": dialect.param,
            "j": dialect.json,
            "c": COLUMNS,
            "request": REQUEST_COLUMNS,
            "insert": INSERT_COLUMNS,
            "same": dialect.same,
            "any": dialect.any,
            "order": order,
            "lock": dialect.lock,
            "skip_locked": dialect.skip_locked,
            "clock": clock_table,
            "greatest": dialect.greatest,
            "strpos": dialect.strpos,
        }

        def render(template: str) -> str:
            return template.format(**names)

        # By (`state.finished`, whether the answer's columns are written).
        finish = {
            (final, answered): _FINISH.replace("{answer}", _ANSWER if answered else "")
            + (_FINAL_ANSWER if final else _WHILE_OWNED)
            for final, answered in ((True, True), (False, True), (False, False))
        }
        self.dialect: Final = dialect
        self.select_id: Final = render(_SELECT + " WHERE id = {p}")
        self.select_key: Final = render(_SELECT + " WHERE key = {p}")
        self.admit: Final = render(_ADMIT)
        self.find_for: Final = render(_FIND_FOR)
        self.existing: Final = render(_EXISTING)
        self.take_over: Final = render(_TAKE_OVER)
        self.merge: Final = render(_MERGE)
        self.record_attempt: Final = render(_RECORD_ATTEMPT)
        self.move: Final = render(_MOVE)
        # By `state.finished` (the final answer's guard, or the lease owner's), and by
        # whether an answer is written.
        self.finish: Final = {which: render(text) for which, text in finish.items()}
        self.finish_returning: Final = {
            which: render(text + " RETURNING {c}") for which, text in finish.items()
        }

        def settle(sets: str, also: str = "", where: str = sql_settled()) -> str:
            text = _SETTLE.replace("{sets}", sets).replace("{where}", where)
            return render(text.replace("{also}", also))

        # Found made (a success), or found declined (failed).
        self.settle_applied: Final = settle(_APPLIED, where=sql_found_applied())
        self.settle_declined: Final = settle(_APPLIED)
        self.settle_not_applied: Final = settle(_NOT_APPLIED)
        self.settle_refused: Final = settle(_REFUSED, _KEEPS_ANSWER)
        self.reap: Final = render(_REAP)
        self.seen: Final = render(_SEEN)
        self.advance: Final = render(_ADVANCE)
        self.stepped_back: Final = render(_STEPPED_BACK)
        self.rewind: Final = render(_REWIND)
        self.purgeable: Final = render(_PURGEABLE)
        self.purge: Final = render(_PURGE)
        self.unfinished: Final = render(_UNFINISHED)
        self.operations: Final = render(_OPERATIONS)
        self.operations_in: Final = render(_OPERATIONS_IN)
        self.counts: Final = render(_COUNTS)
        self.find_ids: Final = render(_FIND_IDS)
        self.find_references: Final = render(_FIND_REFERENCES)
        self.any_reference: Final = render(_ANY_REFERENCE)
        self.find_tail_requests: Final = render(_FIND_TAIL_REQUESTS)
        self.references_first: Final = render(_REFERENCES_FIRST)
        self.references_from: Final = render(_REFERENCES_FROM)
        self.record_settled: Final = render(_RECORD_SETTLED)
        self.reopen: Final = render(_REOPEN)
        self.remember_not_found: Final = render(_REMEMBER_NOT_FOUND)
        self.not_found: Final = render(_NOT_FOUND)
        self.forget_not_found_before: Final = render(_FORGET_NOT_FOUND_BEFORE)
        self.forget_not_found: Final = render(_FORGET_NOT_FOUND)
        self.forget_not_found_of: Final = render(_FORGET_NOT_FOUND_OF)
        self.note_content: Final = render(_NOTE_CONTENT)
        self.find_contents: Final = render(_FIND_CONTENTS)
        self.undigested: Final = render(_UNDIGESTED)
        self.forget_contents_of: Final = render(_FORGET_CONTENTS_OF)
