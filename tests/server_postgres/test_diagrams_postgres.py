"""The seed's diagrams 1 to 4 and the races they rule out, on PostgreSQL.

The bodies are tests/server/test_diagrams.py's (see `reused.py`), except the takeover
race written against the SQLite class directly: `test_admission.py` has its own.
"""

from ..server import test_diagrams
from .reused import bodies_of

globals().update(
    bodies_of(test_diagrams, leave_out=("test_of_two_takeovers_of_one_stale_row_exactly_one_wins",))
)
