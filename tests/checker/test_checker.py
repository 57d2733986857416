"""The model-based checker, bounded for `make test`; `make check-deep` runs it for
minutes (see tests/checker/deep.py and docs/reliability.md)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from .machine import PaymentsMachine

PaymentsMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
TestPaymentsMachine = PaymentsMachine.TestCase
