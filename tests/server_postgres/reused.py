"""Collecting another folder's test functions again, against this folder's fixtures.

pytest collects every `test_*` function (and every fixture) it finds in a test
module's namespace, wherever it was defined, and resolves the fixtures a test asks for
from the folder (and module) it is collected in. So a module here that takes the
functions of a tests/server module into its own namespace runs those very bodies with
`env`, `inproc`, `reference_server` and `live_reference_server` on PostgreSQL; one
that takes tests/inbox/test_delivery.py's and defines its own `server` runs the
webhook tests there.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def bodies_of(module: ModuleType, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The public names of `module` (its tests, its fixtures, what they use), except
    `leave_out`: the tests that do not concern the storage backend."""
    names = {name: value for name, value in vars(module).items() if not name.startswith("_")}
    missing = set(leave_out) - set(names)
    assert not missing, f"{module.__name__} has no {sorted(missing)}: update leave_out"
    return {name: value for name, value in names.items() if name not in leave_out}
