"""Look-ups by id, reference and key, scoped to the caller, on PostgreSQL.

The bodies are tests/server/test_lookups.py's (see `reused.py`).
"""

from ..server import test_lookups
from .reused import bodies_of

globals().update(bodies_of(test_lookups))
