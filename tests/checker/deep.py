"""`make check-deep`: the checker for as long as asked, with its seed printed.

    python -m tests.checker.deep --minutes 10 [--seed N] [--steps 40] [--profile NAME]
        [--no-time-probe]

Runs batches of generated histories until the time is up: in one server profile
(`--profile`, the server speaking it and the client built with it), or by default in
every built-in profile in turn, a batch each. A failure prints the shrunk history as a
script of steps (with the profile and the seed that found it, and how many histories and
seconds in the first failing one came: the rest is shrinking), and exits 1. Re-run with
the same `--seed` (and `--profile`) to replay the same histories.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from .machine import PROFILES, PaymentsMachine

#: histories built, per profile
HISTORIES: Counter[str] = Counter()
#: the first history that failed its invariant: how many histories had been built, and
#: when (seconds since `STARTED`); the rest of a failed run is shrinking
FIRST_FAILURE: list[tuple[int, float]] = []
STARTED = time.monotonic()


def counted(profile: str, *, time_probe: bool = True) -> type[PaymentsMachine]:
    """The checker's machine in `profile` (its clients built with `time_probe`),
    counting the histories it is built for and noting the first that fails its
    invariant."""
    machine = PaymentsMachine.for_profile(profile, time_probe=time_probe)

    def __init__(self: PaymentsMachine) -> None:
        HISTORIES[profile] += 1
        machine.__init__(self)

    def check_invariants(self: PaymentsMachine, *args: Any) -> None:
        with _noting_the_first_failure():
            machine.check_invariants(self, *args)

    def teardown(self: PaymentsMachine) -> None:
        with _noting_the_first_failure():
            machine.teardown(self)

    members = {"__init__": __init__, "check_invariants": check_invariants, "teardown": teardown}
    return type(f"Counted{machine.__name__}", (machine,), members)


@contextlib.contextmanager
def _noting_the_first_failure() -> Iterator[None]:
    try:
        yield
    except AssertionError:
        if not FIRST_FAILURE:
            FIRST_FAILURE.append((sum(HISTORIES.values()), time.monotonic() - STARTED))
        raise


def batch_settings(batch: int, steps: int, *, shrink: bool = True) -> settings:
    """The hypothesis settings of one batch of `batch` histories of up to `steps` steps:
    the same for `make check-deep` and the bounded run of `make test`, so that a seed
    one of them prints replays in the other. `shrink=False`: a failing history is
    reported as it was generated (the mutation suite's measure asks only whether one
    fails)."""
    phases = [Phase.generate, Phase.shrink, Phase.explain] if shrink else [Phase.generate]
    return settings(
        max_examples=batch,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )


def run_for(
    machine: type[PaymentsMachine],
    *,
    chosen_seed: int,
    seconds: float,
    batch: int,
    steps: int,
    shrink: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Batches of `batch` histories of `machine` (one profile's), their seeds drawn from
    `chosen_seed` as `main` draws them, until `seconds` have passed on `clock` (at least
    one batch; `time.process_time`: seconds of this process's CPU, which a loaded
    machine does not shorten). Returns how many batches ran; a failure raises, the
    shrunk history in it."""
    rng = random.Random(chosen_seed)
    chosen = batch_settings(batch, steps, shrink=shrink)
    deadline = clock() + seconds
    batches = 0
    while batches == 0 or clock() < deadline:
        run_state_machine_as_test(seed(rng.randrange(2**64))(machine), settings=chosen)
        batches += 1
    return batches


def summary() -> str:
    return ", ".join(f"{name} {HISTORIES[name]}" for name in PROFILES if HISTORIES[name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.checker.deep")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=40, help="steps per history, at most")
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="histories per batch (default: 200 in one profile, 25 per profile in turn)",
    )
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="the server profile to run in (default: every built-in profile in turn)",
    )
    parser.add_argument(
        "--no-time-probe",
        dest="time_probe",
        action="store_false",
        help="build the clients as by default, with no time probe (steps of the client's"
        " clock while no client runs are then not drawn: see docs/reliability.md)",
    )
    args = parser.parse_args(argv)
    chosen_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    profiles = [args.profile] if args.profile else list(PROFILES)
    where = args.profile or "all profiles in turn"
    replay = f"--seed {chosen_seed}" + (f" --profile {args.profile}" if args.profile else "")
    replay += "" if args.time_probe else " --no-time-probe"
    print(f"checker: seed={chosen_seed} profile={where} minutes={args.minutes} (replay: {replay})")
    sys.stdout.flush()
    logging.disable(logging.CRITICAL)  # the client's warnings, thousands of them
    global STARTED
    STARTED = time.monotonic()
    rng = random.Random(chosen_seed)
    batch = args.batch or (200 if args.profile else 25)
    deadline = time.monotonic() + args.minutes * 60
    batches = 0
    chosen = batch_settings(batch, args.steps)
    machines = {name: counted(name, time_probe=args.time_probe) for name in profiles}
    for profile in itertools.cycle(profiles):
        if time.monotonic() >= deadline:
            break
        batch_seed = rng.randrange(2**64)
        try:
            run_state_machine_as_test(seed(batch_seed)(machines[profile]), settings=chosen)
        except BaseException:  # the failure and its shrunk history are the report
            traceback.print_exc()
            if FIRST_FAILURE:
                found, seconds = FIRST_FAILURE[0]
                print(f"checker: the first failing history was history {found}, {seconds:.0f} s in")
            print(
                f"checker: FAILED in profile {profile} after {sum(HISTORIES.values())}"
                f" histories (seed={chosen_seed}; {summary()})"
            )
            return 1
        batches += 1
        print(f"checker: {profile}: {HISTORIES[profile]} histories, no failure", flush=True)
    print(
        f"checker: seed={chosen_seed}: {sum(HISTORIES.values())} histories in {batches}"
        f" batches, no failure ({summary()})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
