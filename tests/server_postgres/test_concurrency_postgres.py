"""A hundred concurrent POSTs with one key make one payment, on PostgreSQL.

The bodies are tests/server/test_concurrency.py's (see `reused.py`), in-process and
over a socket, except two instances sharing a SQLite file: `test_processes.py` runs
that storm across server processes sharing one PostgreSQL database.
"""

from ..server import test_concurrency
from .reused import bodies_of

globals().update(
    bodies_of(
        test_concurrency,
        leave_out=("test_two_server_instances_on_one_database_file_admit_a_key_once",),
    )
)
