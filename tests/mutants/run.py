"""`make mutants`: apply each mutant to a scratch copy of the tree and run the tests that
kill it; a table at the end, and a failure on any mutant that survives.

    python -m tests.mutants [--full] [--checker] [--only NAME ...] [--jobs N] [--list]

- default: each mutant against its own killers (`Mutant.killers`), the smallest
  behavioural set found to kill it;
- `--full`: each against the wide behavioural set (`WIDE`), stopping at its first
  failure (much longer);
- `--checker`: each against the checker's bounded run alone (`make test`'s, one fixed
  seed, `CHECKER_SEED`, its minute counted in CPU seconds so that a loaded machine
  runs the histories an idle one does): what the checker kills by itself (a survivor
  there is measured, not a failure; see docs/reliability.md).

Nothing is changed in the working tree: the tree is copied once per job into a
temporary directory, each mutant is written into that copy, byte-compiled, tested,
and the file put back. Before any test runs, every anchor is checked against the
working tree: one that is not found exactly once stops the run, naming the mutant.
The killers are run once on the unmutated copy first: a test that fails without a
mutant kills nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .catalog import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
#: The wide behavioural set: the checker, the public API against the reference server
#: or a scripted transport, the batch and the commands end to end. Never tests/unit,
#: nor a store's own tests.
WIDE = (
    "tests/checker",
    "tests/integration",
    "tests/client",
    "tests/profiles",
    "tests/batch",
    "tests/cli",
    "tests/reliability",
)
#: The checker's bounded run, with one seed for every mutant (`--checker`).
CHECKER = ("tests/checker/test_checker.py",)
CHECKER_SEED = "20261207"
#: What is not copied into a scratch tree.
_SKIP = (".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "site")
#: A mutant's tests may take this long before they count as hung (killed: a hang fails).
TIMEOUT = 1800.0


class AnchorError(Exception):
    """A mutant's anchor is not where the catalog says: the code moved."""


@dataclass
class Result:
    mutant: Mutant
    killed: bool
    by: str
    seconds: float


def check_anchors(mutants: tuple[Mutant, ...], root: Path = ROOT) -> None:
    """Every anchor is found exactly once in its file (in `root`), and each mutant
    compiles; else `AnchorError`, naming the mutant."""
    for mutant in mutants:
        path = root / mutant.path
        if not path.exists():
            raise AnchorError(f"anchor not found: {mutant.name} ({mutant.path} is gone)")
        text = path.read_text()
        count = text.count(mutant.anchor)
        if count == 0:
            raise AnchorError(f"anchor not found: {mutant.name} (in {mutant.path})")
        if count > 1:
            raise AnchorError(f"anchor found {count} times: {mutant.name} (in {mutant.path})")
        mutated = text.replace(mutant.anchor, mutant.replacement)
        try:
            compile(mutated, str(path), "exec")
        except SyntaxError as error:
            raise AnchorError(f"mutant does not compile: {mutant.name}: {error}") from error


def scratch_copy(into: Path) -> Path:
    """A copy of the working tree (as it is, uncommitted changes too) under `into`."""
    tree = into / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*_SKIP, "__pycache__"))
    return tree


def pytest_run(
    tree: Path, tests: tuple[str, ...], *, checker_seed: str | None = None
) -> tuple[int, str]:
    """Run `tests` in `tree` (stopping at the first failure): pytest's exit code, and
    the first failing test's node id (or what went wrong)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if checker_seed is not None:
        env["IDEMCLIENT_CHECKER_SEED"] = checker_seed
        env["IDEMCLIENT_CHECKER_SHRINK"] = "0"  # whether a history fails, not which
        # A minute of the checker's CPU, not of wall time: what an idle machine runs
        # in `make test`, however loaded this one is.
        env["IDEMCLIENT_CHECKER_CPU"] = "1"
    command = [
        sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider",
        "-p", "no:randomly", *tests,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return -1, f"hung past {TIMEOUT:.0f}s"
    found = re.search(r"^FAILED (.+?)(?: - |$)", done.stdout, re.MULTILINE)
    if found:
        return done.returncode, found.group(1)
    tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    return done.returncode, tail[0]


def run_one(tree: Path, mutant: Mutant, tests: tuple[str, ...], checker_seed: str | None) -> Result:
    path = tree / mutant.path
    original = path.read_text()
    started = time.monotonic()
    try:
        path.write_text(original.replace(mutant.anchor, mutant.replacement))
        py_compile.compile(str(path), doraise=True)
        code, by = pytest_run(tree, tests, checker_seed=checker_seed)
    finally:
        path.write_text(original)
    seconds = time.monotonic() - started
    if code in (2, 3, 4, 5):
        # Interrupted, internal error, usage error, nothing collected: not a kill.
        raise RuntimeError(f"{mutant.name}: pytest could not run its tests (exit {code}): {by}")
    return Result(mutant, killed=code != 0, by=by if code != 0 else "-", seconds=seconds)


def table(results: list[Result]) -> str:
    width = max(len(r.mutant.name) for r in results)
    lines = [f"{'mutant':<{width}}  {'time':>6}  killed by"]
    for result in results:
        by = result.by if result.killed else "SURVIVED"
        lines.append(f"{result.mutant.name:<{width}}  {result.seconds:>5.0f}s  {by}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants")
    parser.add_argument("--full", action="store_true", help="run the wide behavioural set")
    parser.add_argument(
        "--checker", action="store_true", help="run the checker's bounded run alone (a measure)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these mutants only")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (scratch trees)")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    args = parser.parse_args(argv)
    mutants = MUTANTS
    if args.only:
        unknown = set(args.only) - {m.name for m in MUTANTS}
        if unknown:
            parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
        mutants = tuple(m for m in MUTANTS if m.name in args.only)
    if args.list:
        for mutant in mutants:
            print(f"{mutant.name}  [{mutant.point}]  {mutant.breaks}")
        return 0
    try:
        check_anchors(MUTANTS)
    except AnchorError as error:
        print(f"mutants: {error}", file=sys.stderr)
        return 2

    def tests_of(mutant: Mutant) -> tuple[str, ...]:
        if args.checker:
            return CHECKER
        return WIDE if args.full else mutant.killers

    seed = CHECKER_SEED if args.checker else None
    where = "the wide set" if args.full else "the checker alone" if args.checker else "killers"
    print(f"mutants: {len(mutants)}, each against {where}, {args.jobs} at a time", flush=True)
    with tempfile.TemporaryDirectory(prefix="idemclient-mutants-") as scratch:
        trees = [scratch_copy(Path(scratch) / f"job{n}") for n in range(args.jobs)]
        baseline = tuple(dict.fromkeys(t for m in mutants for t in tests_of(m)))
        code, by = pytest_run(trees[0], baseline, checker_seed=seed)
        if code != 0:
            print(f"mutants: the tests fail without a mutant: {by}", file=sys.stderr)
            return 2
        free = list(trees)
        results: dict[str, Result] = {}

        def job(mutant: Mutant) -> Result:
            tree = free.pop()
            try:
                return run_one(tree, mutant, tests_of(mutant), seed)
            finally:
                free.append(tree)

        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for result in pool.map(job, mutants):
                results[result.mutant.name] = result
                state = f"killed by {result.by}" if result.killed else "SURVIVED"
                print(f"  {result.mutant.name}: {state} ({result.seconds:.0f}s)", flush=True)
    ordered = [results[m.name] for m in mutants]
    print()
    print(table(ordered))
    survivors = [r.mutant.name for r in ordered if not r.killed]
    killed = len(ordered) - len(survivors)
    print(f"\n{killed} of {len(ordered)} killed", end="")
    if not survivors:
        print()
        return 0
    print(f"; survived: {', '.join(survivors)}")
    return 0 if args.checker else 1


if __name__ == "__main__":
    sys.exit(main())
