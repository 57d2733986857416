"""What idemclient costs a process before it does anything: importing it, and its pytest
plugin in a test run that uses no fixture.

Every figure is a median over fresh interpreters, the contenders interleaved round by
round so that drift on a shared machine hits all of them alike. Each child times its
own imports with `time.perf_counter` (the interpreter's start is the same for all and
left out). The children compile into a private bytecode cache first, as an installed
package is, so that no figure includes compiling source.

- `import httpx`: the floor (idemclient is built on it);
- `import idemclient`: the package; target: within 1.3 x of `import httpx`;
- `from idemclient import Client`: the client's engine, loaded at its first use;
- `the pytest plugin`: what the pytest11 entry point loads into every pytest run of a
  project that installs idemclient, after pytest itself; target: at most 50 ms;
- `pytest, no fixture`: a whole pytest run of one test that uses no fixture, with the
  plugin (`-p idemclient._pytest_plugin`) and without; the difference is what the
  plugin adds, within the noise of two process runs.

    python -m benchmarks.startup             # 41 rounds
    python -m benchmarks.startup --rounds 9  # quicker, rougher
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "run"]

COLUMNS = ["median_ms", "vs_httpx"]

ROOT = Path(__file__).resolve().parents[1]

#: label -> what the child runs after `import time`; it prints the seconds it took.
IMPORTS = {
    "import httpx": "import httpx",
    "import idemclient": "import idemclient",
    "from idemclient import Client": "from idemclient import Client",
    "the pytest plugin": "import idemclient._pytest_plugin",
}
#: what is imported before the clock starts (the plugin is loaded by pytest, after it)
BEFORE = {"the pytest plugin": "import pytest"}

TIMED = (
    "import time{before}\nstarted = time.perf_counter()\n{body}\n"
    "print(time.perf_counter() - started)"
)

TEST_FILE = "def test_nothing():\n    assert True\n"


def _environment(cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = cache
    # The checkout's package, ahead of any installed copy.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _import_seconds(label: str, env: dict[str, str], cwd: Path) -> float:
    before = BEFORE.get(label)
    code = TIMED.format(before=f"\n{before}" if before else "", body=IMPORTS[label])
    # Run elsewhere than here: `-c` puts the working directory first on the path.
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def _pytest_seconds(folder: Path, env: dict[str, str], *, plugin: bool) -> float:
    # The entry point is left out either way and the plugin, when on, named by its
    # module: an environment installed from an older checkout names another module in
    # its entry point, and the figure must be this checkout's.
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "no:idemclient"]
    if plugin:
        command += ["-p", "idemclient._pytest_plugin"]
    command.append(str(folder))
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=folder, capture_output=True, check=True)
    return time.perf_counter() - started


def run(rounds: int = 41) -> dict[str, dict[str, Any]]:
    """Medians in milliseconds, and each import beside `import httpx`."""
    samples: dict[str, list[float]] = {label: [] for label in IMPORTS}
    with_plugin: list[float] = []
    without_plugin: list[float] = []
    with tempfile.TemporaryDirectory(prefix="idemclient-startup-") as tmp:
        env = _environment(str(Path(tmp) / "pycache"))
        folder = Path(tmp) / "suite"
        folder.mkdir()
        (folder / "test_nothing.py").write_text(TEST_FILE)
        for label in IMPORTS:  # fill the bytecode cache
            _import_seconds(label, env, folder)
        _pytest_seconds(folder, env, plugin=True)
        for round_ in range(rounds):
            labels = list(IMPORTS)
            shift = round_ % len(labels)
            for label in labels[shift:] + labels[:shift]:
                samples[label].append(_import_seconds(label, env, folder))
            pair = [(True, with_plugin), (False, without_plugin)]
            for plugin, into in pair if round_ % 2 else reversed(pair):
                into.append(_pytest_seconds(folder, env, plugin=plugin))
    base = statistics.median(samples["import httpx"])
    report: dict[str, dict[str, Any]] = {
        label: {
            "median_ms": statistics.median(found) * 1e3,
            "vs_httpx": statistics.median(found) / base,
            "n": len(found),
        }
        for label, found in samples.items()
    }
    report["the pytest plugin"]["vs_httpx"] = None  # a budget in ms, not a ratio
    report["pytest, no fixture, plugin on"] = {
        "median_ms": statistics.median(with_plugin) * 1e3,
        "n": len(with_plugin),
    }
    report["pytest, no fixture, plugin off"] = {
        "median_ms": statistics.median(without_plugin) * 1e3,
        "n": len(without_plugin),
    }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    report = run(args.rounds)
    width = max(map(len, report)) + 2
    print(f"{'':{width}}{'median ms':>12}{'vs httpx':>10}")
    for label, row in report.items():
        ratio = row.get("vs_httpx")
        shown = "" if ratio is None else f"{ratio:.2f}"
        print(f"{label:{width}}{row['median_ms']:12.1f}{shown:>10}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
