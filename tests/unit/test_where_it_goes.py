"""benchmarks/where_it_goes.py counts what it says: each function's own bytecodes per
operation, the client's modules among them, and the frozen values by their class."""

from __future__ import annotations

from benchmarks import instructions, where_it_goes


def test_it_counts_each_functions_own_bytecodes_per_operation() -> None:
    plain = where_it_goes.bytecodes(instructions.plain, 3)
    # the default store (a file): the store doing nothing needs the bench extras
    client = where_it_goes.bytecodes(instructions.idem_default, 3)
    modules = {module for module, _name in client}
    assert {"idemclient/_call.py", "idemclient/_flow.py", "httpx/_client.py"} <= modules
    assert not any(module.startswith("idemclient/") for module, _name in plain)
    # what the client adds is more than nothing, and less than many times httpx
    added = sum(client.values()) - sum(plain.values())
    assert 0 < added < 10 * sum(plain.values())
    # the same run twice counts the same (a count, not a time)
    assert where_it_goes.bytecodes(instructions.plain, 3) == plain
