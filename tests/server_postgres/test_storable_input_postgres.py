"""Text and shapes PostgreSQL would refuse after admission are refused first, as on
SQLite: a NUL, a lone surrogate, nesting past the bound, a token past the bound.

The bodies are tests/server/test_storable_input.py's (see `reused.py`); its profile
servers run here on a database of their own.
"""

import pytest

from ..server import test_storable_input
from .reused import bodies_of

globals().update(bodies_of(test_storable_input))


@pytest.fixture
def server_db(pg_db: str) -> str:
    """The profile servers' database: PostgreSQL, created afresh by each server."""
    return pg_db
