"""What importing idemclient loads: each dependency where it is used, not at import.

Not timed (benchmarks/startup.py measures the time): each test runs a fresh interpreter
and reads `sys.modules`, so a module imported at the top of the wrong file fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: loaded by sqlite-utils, or by the command line, never by the library on its own
HEAVY = ("sqlite_utils", "click", "dateutil", "pluggy", "idemclient.testing")


def _loaded_by(code: str, *, cwd: Path | None = None) -> set[str]:
    """The modules `code` adds to `sys.modules` after `import httpx` (which may load
    click for its own command line): what idemclient itself brings."""
    script = (
        "import sys, json\nimport httpx\nbefore = set(sys.modules)\n"
        + textwrap.dedent(code)
        + "\nprint(json.dumps(sorted(set(sys.modules) - before)))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}


def _alone(code: str) -> set[str]:
    """Every module `code` loads, from a bare interpreter."""
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_idemclient_loads_no_dependency_it_does_not_need_yet() -> None:
    loaded = _alone("import idemclient")
    assert not _heavy(loaded)
    # Not even the client's engine or httpx: the error tree is all it imports.
    assert "httpx" not in loaded
    assert "idemclient._client" not in loaded
    for third_party in ("sqlite_utils", "tenacity", "uuid6", "anyio"):
        assert third_party not in loaded, third_party


def test_the_client_on_an_existing_store_loads_neither_sqlite_utils_nor_click(
    tmp_path: Path,
) -> None:
    create = """
        import idemclient
        idemclient.Client(store="payments.db").close()
    """
    # Creating the store migrates it: sqlite-utils is loaded for that, and only then.
    assert "sqlite_utils" in _loaded_by(create, cwd=tmp_path)
    payment = """
        import httpx
        from idemclient import Client

        def answer(request):
            return httpx.Response(201, json={"id": "pay_1"})

        with Client(
            base_url="https://psp.test",
            store="payments.db",
            transport=httpx.MockTransport(answer),
        ) as psp:
            outcome = psp.post("/v1/payments", json={"amount": 1}, operation_id="order-1")
        assert outcome.raise_for_status().json() == {"id": "pay_1"}
    """
    loaded = _loaded_by(payment, cwd=tmp_path)
    assert "idemclient._client" in loaded  # the engine did run
    assert not _heavy(loaded)


def test_the_pytest_plugin_loads_nothing_of_the_reference_server() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugin = pyproject["project"]["entry-points"]["pytest11"]["idemclient"]
    loaded = _alone(f"import pytest\nbefore = set(sys.modules)\nimport {plugin}")
    assert plugin in loaded
    assert not {m for m in loaded if m.startswith("idemclient.testing")}
    assert "httpx" not in loaded
    assert "uvicorn" not in loaded


def test_the_plugins_fixtures_still_serve_a_test(tmp_path: Path) -> None:
    (tmp_path / "test_shop.py").write_text(
        textwrap.dedent(
            """
            import httpx
            from idemclient.testing import ReferenceServer

            def test_a_payment(reference_server):
                assert isinstance(reference_server, ReferenceServer)
                with httpx.Client(transport=reference_server.transport) as http:
                    answer = http.post(
                        "http://psp.test/v1/payments",
                        headers={"Authorization": "Bearer sk_test_a", "Idempotency-Key": "k-1"},
                        json={"amount": 100, "currency": "EUR", "reference": "r-1"},
                    )
                assert answer.status_code == 201
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The module the entry point names, loaded by name (an environment installed from an
    # earlier checkout names an older module in its entry point).
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-p", "no:idemclient", "-p", "idemclient._pytest_plugin", "test_shop.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
