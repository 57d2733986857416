"""The model-based checker, bounded for `make test`: 300 histories against the
reference profile, and `PER_PROFILE` in every other built-in profile (the server
speaking it, the client built with it). `make check-deep` runs it for minutes, one
profile or all in turn (see tests/checker/deep.py and docs/reliability.md)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from .machine import PROFILES, PaymentsMachine

#: Histories per profile other than the reference server's own.
PER_PROFILE = 20


def bounded(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


PaymentsMachine.TestCase.settings = bounded(300)
TestPaymentsMachine = PaymentsMachine.TestCase


@pytest.mark.parametrize("profile", [name for name in PROFILES if name != "reference"])
def test_the_checker_in_every_profile(profile: str) -> None:
    run_state_machine_as_test(PaymentsMachine.for_profile(profile), settings=bounded(PER_PROFILE))
