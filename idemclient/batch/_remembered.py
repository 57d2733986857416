"""A look-up's "nothing found", kept as it came, and when it is believed again.

A run asks the server about a row before its first send (`_lookup`) and keeps each
answer as it comes: a payment found is recorded as the row's outcome, at once, and a
"nothing found" is kept in the store (`Store.remember_not_found`) with what was asked
and when, on this host's clock and by the server's `Date`. So a run killed during its
look-ups, run again, asks only what it had not asked yet.

A "nothing found" is evidence of the moment it was asked, and the world goes on: the
row may be paid since by another submitter (another machine, an earlier version whose
keys were other, a person at the PSP's dashboard), the server forgets keys after its
retention, and clocks are stepped. A kept one stands in for a new look-up only when
every one of these holds (`believed`); otherwise the row is asked again, which costs
one GET, where believing wrongly could pay twice:

- it answers the same question: the row's key, the same look-up URL (origin, path and
  query, with this reference), read the same way (the reference field, the 404 rule:
  `reading`), asked with the same credentials (their digest, `_sender.Sender.same`);
- the row has no attempt that may have been applied (new to the store, or registered
  and never sent, or never applied where it went): only for such a row does "nothing
  found" send it at once. A row that may have been applied is judged with the
  server's in-flight hold (`_reconcile`), and what its look-up says is recorded there;
- it is young: asked less than `BELIEVED_FOR` ago, and less than a quarter of the
  server's key retention, so that a send of this row's key by another submitter of
  this version since then is still deduplicated by the server when this run sends it.
  Its age is the oldest of its age on this clock and on the server's clock measured
  from this host's stamp, plus the clock skew allowed between the store's hosts (one
  of them may have asked it, on a clock that was ahead), and its age on the server's
  clock alone (its `Date` then and now), where the client knows the server's time
  now (`_time.younger_than`, the rule every such judgement follows);
- its age is known: not asked in this clock's future, no step back of the server's
  clock between the two `Date`s, and no step back of this host's clock seen by the
  store since it was kept (the store then forgets them all: `Store.clock_went_back`).

Within one run, an answer is acted on whatever its age, as it always was: the rows
are sent once every look-up is in.
"""

from __future__ import annotations

from .._seam import younger_than
from ..store import NotFound, ServerTime
from ._sender import Sender, target_of

__all__ = ["BELIEVED_FOR", "believed", "reading"]

#: The longest a kept "nothing found" is believed, counting the clock skew allowed
#: between hosts: about the length of the look-ups of a large file, so that a run
#: killed during them and started again at once asks only what it had not asked.
BELIEVED_FOR = 15 * 60.0


def reading(reference_field: str, reliable_404: bool) -> str:
    """How a look-up's answer was read, in words kept with it: what counts as this
    row's payment (the field holding the reference), and whether a 404 means none."""
    return f"reference_field={reference_field}; 404={'none' if reliable_404 else 'unknown'}"


def believed(
    kept: NotFound,
    *,
    key: str,
    url: str,
    how: str,
    sender: Sender,
    now: float,
    retention: float,
    server: ServerTime | None,
) -> bool:
    """Whether `kept` stands for a look-up of a row never applied anywhere, asked now
    for its `key` at `url` (absolute, without a fragment), read as `how` says (see the
    module docstring): pure, but for `sender`'s digest of the credentials. `server` is
    the server's time now, if the client knows it."""
    if kept.key != key or kept.reading != how or target_of(kept.url) != url:
        return False
    if not sender.same(kept.url):
        return False
    return younger_than(
        min(BELIEVED_FOR, retention / 4),
        kept.asked_at,
        now=now,
        server=server,
        server_stamped=kept.server_at,
    )
