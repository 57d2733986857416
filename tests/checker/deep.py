"""`make check-deep`: the checker for as long as asked, with its seed printed.

    python -m tests.checker.deep --minutes 10 [--seed N] [--steps 40]

Runs batches of generated histories until the time is up; a failure prints the
shrunk history as a script of steps (and the seed that found it), and exits 1.
Re-run with the same `--seed` to replay the same histories.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
import traceback

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from .machine import PaymentsMachine

HISTORIES = [0]


class CountedMachine(PaymentsMachine):
    """The checker's machine, counting the histories it is built for."""

    def __init__(self) -> None:
        HISTORIES[0] += 1
        super().__init__()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.checker.deep")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=40, help="steps per history, at most")
    parser.add_argument("--batch", type=int, default=200, help="histories per batch")
    args = parser.parse_args(argv)
    chosen_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"checker: seed={chosen_seed} minutes={args.minutes} (replay: --seed {chosen_seed})")
    sys.stdout.flush()
    logging.disable(logging.CRITICAL)  # the client's warnings, thousands of them
    rng = random.Random(chosen_seed)
    deadline = time.monotonic() + args.minutes * 60
    batches = 0
    chosen = settings(
        max_examples=args.batch,
        stateful_step_count=args.steps,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink, Phase.explain],
    )
    while time.monotonic() < deadline:
        batch_seed = rng.randrange(2**64)
        try:
            run_state_machine_as_test(seed(batch_seed)(CountedMachine), settings=chosen)
        except BaseException:  # the failure and its shrunk history are the report
            traceback.print_exc()
            print(f"checker: FAILED after {HISTORIES[0]} histories (seed={chosen_seed})")
            return 1
        batches += 1
        print(f"checker: {HISTORIES[0]} histories, no failure", flush=True)
    print(f"checker: seed={chosen_seed}: {HISTORIES[0]} histories in {batches} batches, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
