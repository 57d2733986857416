"""The testing guide's pytest-httpx and respx recipes pass as a user's own suite.

docs/guides/testing.md shows a shop's module that wraps its httpx client, and its tests
written as pytest-httpx (strict by default) and respx (`assert_all_mocked`,
`assert_all_called`, call counts) document them. The files are taken from the page as
they stand and run as a pytest session of their own, with nothing configured for
idemclient: a request the client made on its own (a time probe) would fail them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "testing.md"
ROOT = GUIDE.parents[2]
FILES = ("shop_payments.py", "test_with_pytest_httpx.py", "test_with_respx.py")
_BLOCK = re.compile(r'```python title="([^"]+)"\n(.*?)```', re.DOTALL)


def _recipes() -> dict[str, str]:
    found = dict(_BLOCK.findall(GUIDE.read_text()))
    assert set(FILES) <= set(found), f"the guide lost a recipe: {set(FILES) - set(found)}"
    return {name: found[name] for name in FILES}


def _run(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_recipes_pass_with_pytest_httpx_and_respx_as_documented(tmp_path: Path) -> None:
    run = _run(tmp_path, _recipes())
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 passed" in run.stdout, run.stdout


def test_a_request_the_caller_did_not_make_fails_the_strict_recipe(tmp_path: Path) -> None:
    # The recipes have teeth: with the time probe turned on, the client sends a HEAD
    # the shop's code never made, and pytest-httpx fails every test at teardown.
    files = _recipes()
    wrapped = "idemclient.wrap(http, store=store)"
    assert wrapped in files["shop_payments.py"]
    files["shop_payments.py"] = files["shop_payments.py"].replace(
        wrapped, "idemclient.wrap(http, store=store, time_probe=True)"
    )
    del files["test_with_respx.py"]
    run = _run(tmp_path, files)
    assert run.returncode != 0, run.stdout
    assert "The following requests were not expected" in run.stdout, run.stdout
    assert "HEAD" in run.stdout
