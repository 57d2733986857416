"""One version, written in one place (idemclient/_version.py), and the changelog's
newest section named after it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import idemclient

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "idemclient/_version.py"
    written = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "idemclient").rglob("*.py")
        if re.search(r"^__version__\s*=", path.read_text(), flags=re.M)
    ]
    assert written == ["idemclient/_version.py"]
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", idemclient.__version__)


def test_the_changelogs_newest_section_is_this_version() -> None:
    changelog = (ROOT / "docs" / "changelog.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\](?: - (.+))?$", changelog, flags=re.M)
    assert sections, "no version sections"
    newest, when = sections[0]
    release = re.sub(r"(\.dev\d+|rc\d+)$", "", idemclient.__version__)
    assert newest == release
    if release != idemclient.__version__:
        assert when == "Unreleased"  # a development version: not cut yet
    else:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", when)  # a release is dated


def test_the_command_says_the_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "idemclient", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert idemclient.__version__ in done.stdout
