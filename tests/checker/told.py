"""What each caller was told, held to the server's ledger and key table.

Every result an application process gets back is a claim about the payment: a
`succeeded` outcome says it was applied once, a `failed` one that no payment went
through, `NotSent` that nothing of it reached the server, an `OperationMismatch` (or a
batch row "refused, not sent") that this request was not sent at all. The store's
states are checked elsewhere (`machine.check_step`); here it is the words the caller
acted on, through every door: `Client` and `AsyncClient` (an `Outcome`, or `NotSent`,
`Indeterminate`, `ReconcileRequired`, `KeyConflict`, `OperationMismatch`, a
`StoreError`), `wrap()` (its response's outcome, or the same errors), a batch's report
rows, `resume()`'s outcomes and `reconcile()`'s.

When each claim is judged:

- `succeeded`, at once: the ledger holds exactly one payment for the operation, made,
  and the answer the caller got names that payment (its id);
- "refused" and a `StoreError` before anything was recorded, at once: the process sent
  no request of the operation;
- a batch row `not_sent` whose record was lost with the store ("unsent here": it may
  have been paid before), at once: what the server holds under its key is as it was as
  the run began (nothing of this run was admitted);
- `not_sent` and `failed` are about the future too ("never applied, now and later"):
  an admitted request may be finished later by the server's recovery. Such a claim is
  judged against the server's key table and its ledger for the operation's key, where
  an admitted request shows at once, before the next request under that key reaches the
  server (a later send is the application's own, and may apply), and at the end of the
  history once faults have stopped and the server's recovery has run, before the
  end's resume or look-ups send anything (`judge_all`). `not_sent`: the server holds no
  row for the key (no request under it was ever admitted) and nothing under it is in
  the ledger. `failed`: nothing under the key was made (declined does not count), and
  no request under it is still running (whose recovery could make it).

`Indeterminate` claims nothing but "maybe": it is held to the ledger at the end of the
history, once faults stop, through what the end's resume and look-ups settle it as
(`machine.settle_everything`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from idemclient import Indeterminate, KeyConflict, NotSent, Outcome, State, StoreError
from idemclient.batch import BatchInvalid, Report
from idemclient.errors import OperationMismatch
from idemclient.testing import ReferenceServer

if TYPE_CHECKING:
    from .machine import Operation, PaymentsMachine

#: What a caller can be told, as the judgement reads it.
SAID = (
    "succeeded",
    "failed",
    "not_sent",
    "indeterminate",
    "refused",
    "unrecorded",
    "unsent here",
)


@dataclass
class Told:
    """One claim made to a caller about one operation."""

    op: Operation
    said: str
    #: the key the claim is about (None: the operation was never recorded)
    key: str | None
    #: the door it came through: "Client.post", "AsyncClient.post", "wrap", "batch",
    #: "resume", "reconcile"
    door: str
    #: the body of the answer the caller got, where it has one
    body: bytes | None = None
    #: the resource the caller was told of (a batch report row's `resource_id`)
    resource_id: str | None = None
    #: what the server held under the key as the telling process began ("unsent here")
    before: ServerState | None = None

    def __repr__(self) -> str:
        return f"<{self.door} told {self.op} {self.said} (key {self.key})>"


def said_of_outcome(outcome: Outcome) -> str | None:
    """What an `Outcome` says, or None for one still running elsewhere (`in_flight`)."""
    if outcome.state is State.SUCCEEDED:
        return "succeeded"
    if outcome.state is State.FAILED:
        return "failed"
    if outcome.state is State.NOT_SENT and not outcome.maybe_applied:
        return "not_sent"
    if outcome.state in (State.INDETERMINATE, State.NOT_SENT):
        return "indeterminate"
    return None


def body_of(response: httpx.Response | None) -> bytes | None:
    """The body the caller can read, or None (none, or one the store did not keep)."""
    if response is None:
        return None
    try:
        return response.content
    except Exception:  # an answer given back without its body: nothing to read
        return None


def told_by_result(op: Operation, result: object, door: str) -> list[Told]:
    """The claims one call's `result` (what it returned, or the error it raised) makes
    about `op`."""
    if isinstance(result, Outcome):
        said = said_of_outcome(result)
        if said is None:
            return []
        return [Told(op, said, result.key, door, body_of(result.response))]
    if isinstance(result, KeyConflict):
        return [Told(op, "failed", result.outcome.key, door)]
    if isinstance(result, NotSent):
        said = "not_sent" if not result.outcome.maybe_applied else "indeterminate"
        return [Told(op, said, result.outcome.key, door)]
    if isinstance(result, Indeterminate):
        return [Told(op, "indeterminate", result.outcome.key, door)]
    if isinstance(result, OperationMismatch | BatchInvalid):
        return [Told(op, "refused", None, door)]
    if isinstance(result, StoreError):
        return [Told(op, "unrecorded", None, door)]
    return []


def told_by_report(
    ops: dict[str, Operation], report: Report, *, before: dict[str, ServerState] | None = None
) -> list[Told]:
    """The claims a batch's report makes, row by row (rows of references the machine
    does not know are not its operations). `before`: what the server held under each
    key the row was recorded with as the run began, for a row whose record was lost
    with the store: its `not_sent` says that this run had nothing of it admitted, not
    that it was never paid (before the store was lost). A key the row never had was
    never sent, so nothing is held under it."""
    told = []
    for row in report.rows:
        op = ops.get(row.ref)
        if op is None:
            continue
        said: str | None = row.state
        held = None if before is None else before.get(row.key, NOTHING_HELD)
        if row.reason.startswith("refused, not sent"):
            said = "refused"
        elif row.state == "not_sent" and held is not None:
            said = "unsent here"
        elif row.state not in SAID:
            said = None  # in flight elsewhere, or anything else that claims nothing
        if said is not None:
            told.append(
                Told(op, said, row.key or None, "batch", resource_id=row.resource_id, before=held)
            )
    return told


def judge_now(machine: PaymentsMachine, told: Told, *, posted: int) -> None:
    """Judge what can be judged the moment `told` is told, and keep the rest for
    `judge_key` (`posted`: the operation's requests the telling process sent)."""
    op = told.op
    if told.said == "succeeded":
        resources = machine._resources(op)
        applied = machine.setup.applied(resources)
        made = [entry for entry in applied if entry.status == "succeeded"]
        assert (len(applied), len(made)) == (1, 1), f"{told}, but the ledger has {resources}"
        (entry,) = made
        if told.resource_id is not None:
            assert told.resource_id == entry.resource_id, (
                f"{told} naming {told.resource_id}, but the ledger's is {entry.resource_id}"
            )
        if told.body:
            assert entry.resource_id.encode() in told.body, (
                f"{told}: its answer does not name the payment made, {entry.resource_id}:"
                f" {told.body[:300]!r}"
            )
    elif told.said == "unsent here" and told.key:
        now = server_state(machine, told.key)
        assert now == told.before, (
            f"{told}, but the server's rows and ledger under its key went from"
            f" {told.before} to {now} in that run"
        )
    elif told.said in ("refused", "unrecorded"):
        assert posted == 0, f"{told}, but its process sent {posted} request(s) of it"
    elif told.said in ("not_sent", "failed") and told.key:
        machine.claims.setdefault(told.key, []).append(told)


def judge_key(machine: PaymentsMachine, key: str, *, why: str) -> None:
    """Judge every claim kept for `key` (see the module's docstring) and drop them:
    `why` says when (a request under the key about to reach the server, or the end)."""
    claims = machine.claims.pop(key, [])
    if not claims:
        return
    rows = server_rows(machine.server, machine.client_name, key)
    entries = [e for e in machine.server.ledger() if e.idempotency_key == key]
    for told in claims:
        if told.said == "not_sent":
            assert (rows, entries) == ([], []), (
                f"{told}, yet {why} the server holds {rows} under its key and the ledger"
                f" has {entries}"
            )
        else:
            made = [e for e in entries if e.status != "declined"]
            running = [row for row in rows if row[1] == "started"]
            assert (made, running) == ([], []), (
                f"{told}, yet {why} the ledger has {made} under its key"
                f" and the server runs {running}"
            )


def judge_all(machine: PaymentsMachine, *, why: str) -> None:
    for key in list(machine.claims):
        judge_key(machine, key, why=why)


#: What the server holds under a key: its key rows (key, state) and its ledger entries
#: (resource id, status).
ServerState = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]
#: What the server holds under a key nothing was ever sent under.
NOTHING_HELD: ServerState = ((), ())


def server_state(machine: PaymentsMachine, key: str) -> ServerState:
    rows = server_rows(machine.server, machine.client_name, key)
    entries = [
        (e.resource_id, e.status) for e in machine.server.ledger() if e.idempotency_key == key
    ]
    return tuple(rows), tuple(entries)


def server_rows(server: ReferenceServer, client: str, key: str) -> list[tuple[str, str]]:
    """The server's key rows for the client's `key`, (row key, state) each: the key
    itself, or the key and what the server adds after a "/" (the request's hash under
    django-idempotency-key, a run id for a request run beside another in flight)."""
    storage: Any = server._storage
    with storage._read() as conn:
        found = conn.execute(
            "SELECT key, state FROM idempotency_keys"
            " WHERE client = ? AND (key = ? OR substr(key, 1, ?) = ?)",
            (client, key, len(key) + 1, key + "/"),
        ).fetchall()
    return [(str(row[0]), str(row[1])) for row in found]


def reference_in(request: httpx.Request) -> str | None:
    """The end-to-end reference a payment request carries in its JSON body."""
    try:
        document = json.loads(request.content or b"null")
    except ValueError:
        return None
    value = document.get("reference") if isinstance(document, dict) else None
    return value if isinstance(value, str) else None
