"""Every example reads a payment only from an outcome it checked: a declined card (a
final 402, returned as an `Outcome` in state `failed`) is never taken for a payment.

The README's example (the same code as examples/quickstart.py) runs against a
reference server that declines, and the code blocks of the README and docs/ and the
files of examples/ are read for an outcome's body used without a check."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

#: Makes every `ReferenceServer()` the example builds decline its next payment.
DECLINING = """
import idemclient.testing

_built = idemclient.testing.ReferenceServer.__init__


def _declining(self, *args, **kwargs):
    _built(self, *args, **kwargs)
    self.external_fault(1, "decline")


idemclient.testing.ReferenceServer.__init__ = _declining
"""


def _readme_example() -> str:
    [example] = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return example


def test_the_readme_example_says_a_declined_card_was_not_charged(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DECLINING + _readme_example()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("not charged: operation 'order-1042'"), done.stdout
    assert "402" in done.stdout
    assert "pay_" not in done.stdout


def _sources() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        if page.name == "changelog.md":
            continue  # history, not an example
        for number, block in enumerate(
            re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S), start=1
        ):
            found.append((f"{page.relative_to(ROOT)} block {number}", block))
    for example in sorted((ROOT / "examples").glob("*.py")):
        found.append((str(example.relative_to(ROOT)), example.read_text()))
    return found


#: an outcome's body read: `outcome.json()`, `first.json()["id"]`...
READ = re.compile(r"\boutcome\b[^\n]*\.json\(\)|\.json\(\)\[\"id\"\]")
#: a check that the operation succeeded, before its body is read
CHECKED = re.compile(r"raise_for_status\(\)|\.succeeded\b|State\.SUCCEEDED")


@pytest.mark.parametrize(("where", "code"), _sources(), ids=lambda value: str(value)[:60])
def test_no_example_reads_an_unchecked_outcome(where: str, code: str) -> None:
    for read in READ.finditer(code):
        check = CHECKED.search(code)
        assert check is not None, f"{where} reads an outcome's body and never checks it"
        assert check.start() < read.end(), (
            f"{where} reads an outcome's body without checking that it succeeded: {read.group()}"
        )


def test_the_home_page_shows_the_readme_example() -> None:
    home = (ROOT / "docs" / "index.md").read_text()
    assert re.findall(r"```python\n(.*?)```", home, flags=re.S) == [_readme_example()]
