"""Every row of the response matrix, in-process and over a socket, on PostgreSQL.

The bodies are tests/server/test_matrix.py's (see `reused.py`).
"""

from ..server import test_matrix
from .reused import bodies_of

globals().update(bodies_of(test_matrix))
