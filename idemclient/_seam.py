"""The features' one way below the client's public surface: the batch's, the outbox's
and the commands'.

`idemclient batch submit` does what no caller of `Client.post` does: it registers a
whole file's intents before the first send, sends each registered operation through
the client's own path, looks payments up and settles rows by what it finds, and
writes the store's records itself where a look-up finds a payment. The outbox records
an intent in the application's own transaction and sends it later; the operator's
commands open a store by its location and judge a look-up as the client does. What
they need for that, beyond the public names (`idemclient`, `idemclient.store` and its records,
`.keys`, `.policy`, `.hooks`, `.clock`, `.profiles` and the error tree), is here and
nowhere else, so that the engine, the store and the time judgements can change
behind it:

- running operations as effects, in this thread or awaited (`_operations`): `Op`,
  `Blocking`, `Each`, `Feed`, `Close`, `Http`, `Pause`, `run`, `arun`; an intent
  built as the client builds one (`intent_for`, `fingerprints`, `Fingerprints`,
  `same`), recorded ahead in another transaction (`intent_ahead`), sent once
  registered (`send_registered`), its outcome given as the client gives it
  (`settle`); a client's settings and the profile its host speaks (`settings_of`,
  `profile_for`, `read_existing`), and its store opened where it was deferred
  (`opened`);
- the store: a client's store as the whole interface the batch needs (`as_admin`),
  one opened from a path or URL (`open_store`, `POSTGRES_SCHEMES`), or found absent
  there without creating one (`store_absent`), this process as
  a lease's owner (`of_this_process`), the statuses of a request never applied
  (`NEVER_APPLIED_STATUSES`);
- settling by a look-up (`reconcile`, the module, so that what it calls is looked up
  when called; and `Verdict`, `LookupRules`, `Unquotable`, `fill`, `judge`, `listed`);
- time: the clock skew allowed between hosts (`CLOCK_SKEW`), the servers' `Date`
  read as a second clock (`DATE_RESOLUTION`, `parse_date`, `went_back`), a record
  within a key's retention (`retained`) and an answer young enough to believe
  (`younger_than`) by every clock, whether a policy sets the key retention
  (`retention_set`) and the longest wait of its backoff (`backoff_ceiling`);
- a profile resolved for a method and path (`Resolved`), the statuses a profile names
  (`codes_in`), the provider of a host (`provider_at`, `normal_host`);
- what is never shown or written (`redact_url`, `shown_url`, `origin_of`,
  `looks_secret`) and a log record's fields (`log_fields`).
"""

from __future__ import annotations

from . import _reconcile as reconcile
from ._db import POSTGRES_SCHEMES
from ._deferred import opened
from ._hooks import log_fields
from ._hosts import normal_host, provider_at
from ._operations import (
    CLOCK_SKEW,
    Blocking,
    Close,
    Each,
    Feed,
    Fingerprints,
    Http,
    Op,
    Pause,
    arun,
    fingerprints,
    intent_ahead,
    intent_for,
    profile_for,
    run,
    same,
    send_registered,
    settings_of,
    settle,
)
from ._policy import backoff_ceiling, retention_set
from ._profile import Resolved, codes_in
from ._reconcile import LookupRules, Unquotable, Verdict, fill, judge, listed
from ._redaction import looks_secret, origin_of, redact_url, shown_url
from ._resume import read_existing
from ._server_time import DATE_RESOLUTION, parse_date, went_back
from ._store import NEVER_APPLIED_STATUSES, as_admin
from ._store._open import open_store, store_absent
from ._store._owners import of_this_process
from ._time import retained, younger_than

__all__ = [
    "CLOCK_SKEW",
    "DATE_RESOLUTION",
    "NEVER_APPLIED_STATUSES",
    "POSTGRES_SCHEMES",
    "Blocking",
    "Close",
    "Each",
    "Feed",
    "Fingerprints",
    "Http",
    "LookupRules",
    "Op",
    "Pause",
    "Resolved",
    "Unquotable",
    "Verdict",
    "arun",
    "as_admin",
    "backoff_ceiling",
    "codes_in",
    "fill",
    "fingerprints",
    "intent_ahead",
    "intent_for",
    "judge",
    "listed",
    "log_fields",
    "looks_secret",
    "normal_host",
    "of_this_process",
    "open_store",
    "opened",
    "origin_of",
    "parse_date",
    "profile_for",
    "provider_at",
    "read_existing",
    "reconcile",
    "redact_url",
    "retained",
    "retention_set",
    "run",
    "same",
    "send_registered",
    "settings_of",
    "settle",
    "shown_url",
    "store_absent",
    "went_back",
    "younger_than",
]
