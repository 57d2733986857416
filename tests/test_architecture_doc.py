"""docs/architecture.md draws the package's tree: every module and package it names
exists, and every one that exists is drawn, so the page cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import idemclient

PACKAGE = Path(idemclient.__file__).parent
PAGE = Path(__file__).parents[1] / "docs" / "architecture.md"


def drawn() -> set[str]:
    """The module and package names in the page's tree (the first code block)."""
    block = PAGE.read_text().split("```")[1]
    return set(re.findall(r"\b(_?[a-z_]+(?:\.py|/))", block)) - {"idemclient/"}


def present() -> set[str]:
    names = {path.name for path in PACKAGE.glob("*.py")}
    names |= {f"{path.name}/" for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    return names


def test_every_name_the_page_draws_exists() -> None:
    assert drawn() - present() == set()


def test_every_module_and_package_is_drawn() -> None:
    assert present() - drawn() == {"__main__.py"}
