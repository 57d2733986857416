"""The README's code is what a user copies first: it type-checks under `mypy --strict`
and runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mypy import api as mypy_api

ROOT = Path(__file__).parents[2]


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(), flags=re.S)


def test_the_readme_example_type_checks_strictly(tmp_path: Path) -> None:
    [example] = python_blocks(ROOT / "README.md")
    source = tmp_path / "readme_example.py"
    source.write_text(example)
    out, err, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 0, out + err


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    [example] = python_blocks(ROOT / "README.md")
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"succeeded pay_[0-9a-f]+\n", done.stdout), done.stdout
