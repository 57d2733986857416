"""The model-based checker, bounded for `make test`: about a minute of generated
histories (`BUDGET`), shared among the built-in profiles by weight (`weight`): the
profiles whose server does not guard a key in flight, those whose key is a body field
or a header of their own, and the reference server's own get more. `make check-deep`
runs it for minutes, one profile or all in turn (see tests/checker/deep.py and
docs/reliability.md).

The histories are drawn from a seed, a new one each run (`IDEMCLIENT_CHECKER_SEED`
fixes it): a failure says the seed, and the command that replays the profile's
histories (`make check-deep SEED=... PROFILE=...` with the same batches)."""

from __future__ import annotations

import os
import random
import time

import pytest

from idemclient.profiles import named

from .deep import run_for
from .machine import PROFILES, PaymentsMachine

#: Seconds of histories for the whole bounded run (`IDEMCLIENT_CHECKER_SECONDS`).
BUDGET = float(os.environ.get("IDEMCLIENT_CHECKER_SECONDS", "60"))
#: Histories per batch and steps per history.
BATCH = 10
STEPS = 30
#: The run's seed: each profile's is drawn from it.
SEED = int(os.environ.get("IDEMCLIENT_CHECKER_SEED") or random.SystemRandom().randrange(2**32))
#: A failing history is shrunk before it is shown, unless `IDEMCLIENT_CHECKER_SHRINK=0`
#: (the mutation suite's measure, which asks only whether one fails).
SHRINK = os.environ.get("IDEMCLIENT_CHECKER_SHRINK", "1") != "0"
#: The budget is wall time, unless `IDEMCLIENT_CHECKER_CPU=1`: seconds of this process's
#: CPU (the mutation suite's measure, so that a machine loaded by other jobs runs as
#: many histories as an idle one does in a minute of wall time).
CLOCK = time.process_time if os.environ.get("IDEMCLIENT_CHECKER_CPU") == "1" else time.monotonic


def weight(name: str) -> float:
    """A profile's share of the budget: one, and one more for each of a server that does
    not guard a key in flight (a second request runs beside the first), a key in a
    body field, a key header of its own (a client that put it elsewhere pays twice
    there only), and the reference server's own protocol (every rule speaks it)."""
    profile = named(name)
    return (
        1.0
        + (not profile.guards_in_flight)
        + (profile.key.header is None)
        + (profile.key.header not in (None, "Idempotency-Key"))
        + (name == "reference")
    )


WEIGHTS = {name: weight(name) for name in PROFILES}


def profile_seed(name: str) -> int:
    return random.Random(f"{SEED}:{name}").randrange(2**32)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_checker(profile: str) -> None:
    seconds = BUDGET * WEIGHTS[profile] / sum(WEIGHTS.values())
    chosen = profile_seed(profile)
    try:
        run_for(
            PaymentsMachine.for_profile(profile),
            chosen_seed=chosen,
            seconds=seconds,
            batch=BATCH,
            steps=STEPS,
            shrink=SHRINK,
            clock=CLOCK,
        )
    except BaseException as failure:
        failure.add_note(
            f"checker seed {SEED} (IDEMCLIENT_CHECKER_SEED={SEED} replays this run); its"
            f" {profile} histories: python -m tests.checker.deep --profile {profile}"
            f" --seed {chosen} --batch {BATCH} --steps {STEPS}"
            f" (make check-deep PROFILE={profile} SEED={chosen} runs them in batches of 200)"
        )
        raise


#: The profiles the bounded run also checks with clients built by default (no time
#: probe), and the share of `BUDGET` each gets: one whose server guards a key in flight
#: and one whose server does not.
BY_DEFAULT = ("reference", "paypal")
BY_DEFAULT_SHARE = 0.05


@pytest.mark.parametrize("profile", BY_DEFAULT)
def test_the_checker_with_clients_built_by_default(profile: str) -> None:
    chosen = profile_seed(f"{profile}:by-default")
    try:
        run_for(
            PaymentsMachine.for_profile(profile, time_probe=False),
            chosen_seed=chosen,
            seconds=BUDGET * BY_DEFAULT_SHARE,
            batch=BATCH,
            steps=STEPS,
            shrink=SHRINK,
        )
    except BaseException as failure:
        failure.add_note(
            f"checker seed {SEED} (IDEMCLIENT_CHECKER_SEED={SEED} replays this run); its"
            f" {profile} histories with clients built by default: python -m"
            f" tests.checker.deep --profile {profile} --seed {chosen} --batch {BATCH}"
            f" --steps {STEPS} --no-time-probe"
        )
        raise
