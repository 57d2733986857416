"""An opt-in switch that pins the retry jitter a client draws when no `rng` is given.

A client (or transport) built without `rng` draws its jitter from a fresh, unseeded
`random.Random()` (idemclient/_transport.py `make_settings`), so how many scripted faults
a call uses before its deadline, and where a wait ends, varies from run to run. A test
whose result depends on that draw fails now and then, on CI, and passes again when re-run.
This switch makes those draws reproducible, to find such tests on purpose:

    IDEMCLIENT_TEST_JITTER=low     every wait at its lower bound (0)
    IDEMCLIENT_TEST_JITTER=high    every wait at its upper bound (the backoff ceiling)
    IDEMCLIENT_TEST_JITTER=seed:N  a `random.Random(N)` for every client

Unset (the default), nothing changes. tests/conftest.py installs it in the test process;
for the client processes a test starts (the CLI, the crash children) it puts a
`sitecustomize` on their PYTHONPATH that installs it there too. A client given its own
`rng` keeps it.
"""

from __future__ import annotations

import os
import random
import types
from collections.abc import Callable
from pathlib import Path

ENV = "IDEMCLIENT_TEST_JITTER"


class LowJitter(random.Random):
    """Every draw at its lower bound."""

    def random(self) -> float:
        return 0.0

    def uniform(self, a: float, b: float) -> float:
        return min(a, b)


class HighJitter(random.Random):
    """Every draw at its upper bound."""

    def random(self) -> float:
        return 0.999999

    def uniform(self, a: float, b: float) -> float:
        return max(a, b)


def factory(mode: str) -> Callable[[], random.Random]:
    """What builds a client's default random source under `mode`."""
    if mode == "low":
        return LowJitter
    if mode == "high":
        return HighJitter
    if mode.startswith("seed:"):
        seed = int(mode.removeprefix("seed:"))
        return lambda: random.Random(seed)
    raise ValueError(f"{ENV}={mode!r}: expected low, high or seed:N")


def install(mode: str) -> None:
    """Make `make_settings` build its default random source with `factory(mode)`."""
    from idemclient import _transport

    build = factory(mode)
    # Only the transport module's name is rebound: `random.Random` stays whole for
    # everything else (hypothesis, the reference server's webhook order).
    _transport.random = types.SimpleNamespace(Random=build)  # type: ignore[assignment]


def install_in_children(where: Path) -> None:
    """Write a `sitecustomize` into `where` and put it first on PYTHONPATH, so that the
    Python processes a test starts install the switch too."""
    root = Path(__file__).resolve().parents[2]
    (where / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"sys.path.append({str(root)!r})\n"
        "from tests.support import jitter\n"
        f"jitter.install(os.environ[{ENV!r}])\n"
    )
    paths = [str(where), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
