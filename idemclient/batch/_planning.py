"""A run's first phase, plan (see `_run`): each row's identity and what the store
knows of it (`_plan.plan_row`), and for each row the store does not know, whether it
holds the very same payment under another reference (`_duplicates`, `_resave`)."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from .._errors import BatchInvalid
from .._seam import fingerprints, intent_for
from . import _resave as resave
from ._duplicates import DUPLICATE_ADVICE, Paths, by_tail, duplicate_problem, duplicates, tails_of
from ._identity import forms, scoped
from ._kin import Kin
from ._plan import JSON_BODY, SCOPE_ADVICE, RowAction
from ._report import recorded_line
from ._resave import HELD_ADVICE, Held
from ._run_rows import NEW_CODES, At, RunRow, recorded_intent, start_of
from ._run_state import RunState
from ._sender import Sender, credentials_of

__all__ = ["Planning"]


class Planning(RunState):
    """1. plan: decide every row before anything is asked or sent."""

    def plan(self) -> None:
        """Decide every row (a chunk at a time): a known reference with other content, a
        row that may have been applied elsewhere, or a duplicate refuses the batch
        (`BatchInvalid`, nothing recorded or sent); a row done is reported now."""
        batch, target = self.batch, self.target
        now = self.clock.time()
        request = self.http.build_request(
            "POST", target.path, headers={"Content-Type": "application/json"}
        )
        template = intent_for(request, b"")
        self._template = template
        url = httpx.URL(template.url)
        self._sender = Sender(credentials_of(request, self.http.auth))
        self._marked = self._sender.mark(str(url))
        self._fingerprint = fingerprints("POST", url, content_type=JSON_BODY)
        self._planned_at = now
        self.plan_server_time(url)
        problems: list[tuple[int, str]] = []
        duplicated: list[tuple[int, str]] = []
        holds: list[tuple[int, str]] = []
        # A store that holds no reference (a file's first run) holds no payment under
        # another reference: nothing to check, and no value of the file to keep.
        kin = None if target.new_payments is True or not self.store.references(limit=1) else Kin()
        try:
            for start, stop in self._chunks():
                if self.stopping.is_set():  # interrupted: the rows not planned are told so
                    return
                items = self._planned(start, stop)
                for item in items:
                    plan, identity = item.plan, item.identity
                    self.decisions[plan.decision.value] += 1
                    self.decisions["looked up"] += plan.look_up
                    if plan.decision is RowAction.REFUSED:
                        problems.append(
                            (item.row.number, f"reference {identity.reference!r} {plan.why}")
                        )
                        if plan.advice and (0, plan.advice) not in problems:
                            problems.insert(0, (0, plan.advice))
                        self.status[item.index] = At.REFUSED
                    elif plan.decision is RowAction.DONE:
                        assert plan.record is not None
                        self._done(item, recorded_line(item, plan.record))
                    else:
                        self.status[item.index] = start_of(plan)
                        if kin is not None and plan.decision is RowAction.NEW:
                            # In every Unicode form a reference may be recorded in.
                            kin.add(form for value in tails_of(item.row) for form in forms(value))
            if kin is not None:
                gathered = kin.gather(self.store)
                resave.backfill(self.store, target.operation)  # rows without a digest yet
                for start, stop in self._chunks(NEW_CODES):
                    items = self._planned(start, stop, NEW_CODES)
                    # Duplicates only where a reference ended with one of the file's values.
                    duplicates_here = self._duplicates(items, kin) if gathered else []
                    duplicated += duplicates_here
                    holds += self._resaved(items, {number for number, _ in duplicates_here})
        finally:
            if kin is not None:
                kin.close()
        if problems or duplicated or holds:
            # Held, and nothing else wrong: the operator's word is awaited (its own exit).
            refused = Held if not (problems or duplicated) else BatchInvalid
            if any("other content" in why for _, why in problems):
                problems.insert(0, (0, SCOPE_ADVICE))
            if duplicated:
                problems[:0] = [(0, DUPLICATE_ADVICE), *duplicated]
            if holds:
                problems[:0] = [(0, HELD_ADVICE), *holds]
            raise refused(batch.source, sorted(problems, key=lambda p: p[0]))

    def _resaved(self, items: Sequence[RunRow], duplicated: set[int]) -> list[tuple[int, str]]:
        """Of `items`, the new rows whose payment the store holds under another
        reference (`_resave`), but those the operator names new payments, and the duplicates
        said already: found through the store's index of payment digests."""
        new = [
            item
            for item in items
            if item.plan.decision is RowAction.NEW
            and item.row.number not in duplicated
            and not self.target.is_new_payment(item)
        ]
        if not new:
            return []
        rows = (
            (item.row.number, item.identity.reference, item.identity.bare, self._digest(item))
            for item in new
        )
        by_number = {item.row.number: item for item in new}
        held = []
        for resaved in resave.held(self.store, self.target.operation, rows, self._of_this_file):
            self.status[by_number[resaved.number].index] = At.REFUSED
            held.append((resaved.number, resaved.why()))
        return held

    def _of_this_file(self, reference: str) -> bool:
        """Whether `reference` (in NFC) is one of this file's: made once, when a payment
        under another reference is first found (rare)."""
        if self._references is None:
            batch = self.batch
            self._references = frozenset(scoped(batch.scope, row.reference) for row in batch.rows)
        return reference in self._references

    def _duplicates(self, items: Sequence[RunRow], kin: Kin) -> list[tuple[int, str]]:
        """Of `items`, the new rows whose very content the store holds under another
        reference (`_duplicates`), among the operations `kin` gathered for their values."""
        new = [
            item
            for item in items
            if item.plan.decision is RowAction.NEW and not self.target.is_new_payment(item)
        ]
        wanted = (form for item in new for value in tails_of(item.row) for form in forms(value))
        named = kin.of(wanted) if new else ()
        if not named:
            return []
        records = {r.operation_id: r for r in self.store.find(operation_ids=named)}
        index = by_tail(map(recorded_intent, records.values()), self.target.operation)
        if not index:
            return []
        paths = Paths()
        problems = []
        for item in new:
            listed = duplicates(
                item.identity, item.row, self.request_of(item.row, item.identity), index, paths
            )
            # As the store has them now (one purged meanwhile is no duplicate any more).
            stored = [records[t.operation_id] for t in listed if t.operation_id in records]
            if stored:
                self.status[item.index] = At.REFUSED
                problems.append((item.row.number, duplicate_problem(item.identity, stored)))
        return problems
