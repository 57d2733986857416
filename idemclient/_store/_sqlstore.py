"""What both SQL backends do the same way, written once: `SQLStore`.

`SQLStore` implements the `AdminStore` protocol (declared once, in `_interface`): it holds
every method whose logic is the same on SQLite and on PostgreSQL, so the lease fencing
and the rules about final answers cannot drift apart between the two. It is put
together here from rooms of one job each, all standing on `SQLBase` (`_sql_base`: the
options, the connections, a row read as a record):

- `_sql_sending`: what a client writes to send an operation (begin, claim, attempts,
  finish, settle, the takeover of a lease);
- `_sql_clock`: the store's high-water mark and a clock stepped back;
- `_sql_reading`: the look-ups a client and an operator make;
- `_sql_batch`: what the batch writes and reads beyond sending (registration's
  conflicts, a row found on the server, a corrected row reopened, the look-ups'
  "none" and the bodies' digests);
- `_sql_operators`: an operator's repairs and upkeep (move, reap, purge);
- `_sql_written`: the values a write takes, and the record it wrote without reading it
  back.

What a backend does its own way stays there: opening and closing (SQLite's file, WAL
and fsync levels; PostgreSQL's pool, schema and `synchronous_commit`), admission
(SQLite commits queued intents in groups), and `register` (SQLite in chunks inside
one transaction; PostgreSQL in one statement a chunk, also inside the application's own
transaction for the outbox).
"""

from __future__ import annotations

from abc import ABC

from ._interface import AdminStore
from ._sql_batch import SQLBatch, refused
from ._sql_clock import SQLClock
from ._sql_operators import SQLOperators
from ._sql_reading import SQLReading
from ._sql_sending import SQLSending
from ._sql_written import admission_values, admitted, finished_record

__all__ = ["SQLStore", "admission_values", "admitted", "finished_record", "refused"]


class SQLStore(SQLSending, SQLClock, SQLReading, SQLBatch, SQLOperators, AdminStore, ABC):
    """The shared half of a SQL backend of `AdminStore`: its rooms, put together (see the
    module docstring)."""
