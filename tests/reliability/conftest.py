"""Fixtures of the reliability tests: seeds that are printed, and the figures they count.

Randomized tests draw a seed from `IDEMCLIENT_SEED` (to reproduce a failure) or from
the OS; it is printed during setup, so pytest shows it with any failure. With
`IDEMCLIENT_FIGURES` set, the figures each test counted (trials, faults, effects) are
printed at the end of the run, and written as JSON when the value is a file name.
"""

from __future__ import annotations

import json
import os
import random
import threading
from typing import Any

import pytest

FIGURES_ENV = "IDEMCLIENT_FIGURES"
SEED_ENV = "IDEMCLIENT_SEED"


class Figures:
    """What the reliability tests counted, by section. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sections: dict[str, dict[str, Any]] = {}

    def add(self, section: str, name: str, value: int | float | str) -> None:
        with self._lock:
            counts = self.sections.setdefault(section, {})
            if isinstance(value, int) and isinstance(counts.get(name), int):
                counts[name] += value
            else:
                counts[name] = value

    def count(self, section: str, **values: int | float | str) -> None:
        for name, value in values.items():
            self.add(section, name, value)


_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    return _FIGURES


@pytest.fixture
def seed() -> int:
    chosen = os.environ.get(SEED_ENV)
    value = int(chosen) if chosen else random.SystemRandom().randrange(2**32)
    # Shown by pytest with any failure of the test ("Captured stdout setup").
    print(f"seed={value} (reproduce with {SEED_ENV}={value})")
    return value


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    target = os.environ.get(FIGURES_ENV)
    if not target or not _FIGURES.sections:
        return
    terminalreporter.section("reliability figures")
    for section, counts in sorted(_FIGURES.sections.items()):
        shown = ", ".join(f"{name}={value}" for name, value in counts.items())
        terminalreporter.write_line(f"{section}: {shown}")
    if target != "1":
        with open(target, "w") as out:
            json.dump(_FIGURES.sections, out, indent=2, sort_keys=True)
        terminalreporter.write_line(f"written to {target}")
