"""Kill the handler after every phase: recovery finishes it exactly once, on PostgreSQL.

The bodies are tests/server/test_crash_recovery.py's (see `reused.py`); with a real
process killed after every phase in `test_processes.py`.
"""

from ..server import test_crash_recovery
from .reused import bodies_of

globals().update(bodies_of(test_crash_recovery))
