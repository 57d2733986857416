import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient import RetryPolicy
from idemclient._classify import AttemptKind, Classification
from idemclient._policy import backoff_ceiling, decide
from idemclient.policy import RetryBudget

POLICY = RetryPolicy()
THROTTLED = Classification(AttemptKind.THROTTLED, retry=True, maybe_applied=False)
TIMED_OUT = Classification(AttemptKind.MAYBE_APPLIED, retry=True, maybe_applied=True)
REJECTED = Classification(AttemptKind.REJECTED, retry=False, maybe_applied=False)
NOW = 1_800_000_000.0


def test_defaults_are_bounded() -> None:
    assert POLICY.max_attempts == 8
    assert POLICY.deadline == 60.0
    assert POLICY.initial_backoff == 0.25
    assert POLICY.backoff_factor == 2.0
    assert POLICY.max_backoff == 20.0
    assert POLICY.methods == frozenset({"POST", "PATCH"})
    assert POLICY.retry_statuses == frozenset({409, 429, 500, 502, 503, 504})


def test_policy_is_immutable_and_replace_validates() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        POLICY.deadline = 5  # type: ignore[misc]
    shorter = POLICY.replace(deadline=5.0)
    assert shorter.deadline == 5.0
    assert POLICY.deadline == 60.0
    with pytest.raises(ValueError, match="deadline"):
        POLICY.replace(deadline=float("inf"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 0),
        ("deadline", 0),
        ("deadline", float("nan")),
        ("initial_backoff", -1),
        ("backoff_factor", 0.5),
        ("max_backoff", float("inf")),
        ("max_retry_after", -1),
        ("attempt_timeout", 0),
        ("key_retention", 0),
    ],
)
def test_unbounded_or_nonsense_settings_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})


def test_methods_are_normalised() -> None:
    assert RetryPolicy(methods=frozenset({"post", "put"})).methods == {"POST", "PUT"}


@pytest.mark.parametrize(
    ("retry_number", "ceiling"),
    [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (7, 16.0), (8, 20.0), (60, 20.0), (10_000, 20.0)],
)
def test_backoff_ceiling_doubles_up_to_the_cap(retry_number: int, ceiling: float) -> None:
    assert backoff_ceiling(POLICY, retry_number) == pytest.approx(ceiling)


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    rng = random.Random(7)
    waits = [
        decide(POLICY, THROTTLED, attempts=3, remaining=60, server_wait=None, now=NOW, rng=rng).wait
        for _ in range(2000)
    ]
    assert 0 <= min(waits) < 0.05
    assert 0.95 < max(waits) <= 1.0


def test_not_retryable_stops() -> None:
    decision = decide(
        POLICY, REJECTED, attempts=1, remaining=60, server_wait=None, now=NOW, rng=random.Random()
    )
    assert decision.action == "stop"


def test_attempts_are_bounded() -> None:
    decision = decide(
        POLICY, THROTTLED, attempts=8, remaining=60, server_wait=None, now=NOW, rng=random.Random()
    )
    assert decision.action == "stop"
    assert "max_attempts" in decision.reason


def test_server_wait_is_a_floor() -> None:
    decision = decide(
        POLICY, THROTTLED, attempts=1, remaining=60, server_wait=3.0, now=NOW, rng=random.Random()
    )
    assert decision.action == "retry"
    assert decision.wait == 3.0
    assert decision.not_before == NOW + 3.0


def test_server_wait_past_the_deadline_stops_now_and_records_not_before() -> None:
    decision = decide(
        POLICY, THROTTLED, attempts=1, remaining=10, server_wait=30.0, now=NOW, rng=random.Random()
    )
    assert decision.action == "stop"
    assert decision.wait == 0.0
    assert decision.not_before == NOW + 30.0


def test_server_wait_over_max_retry_after_stops_now() -> None:
    policy = POLICY.replace(max_retry_after=5.0, deadline=600.0)
    decision = decide(
        policy, THROTTLED, attempts=1, remaining=600, server_wait=6.0, now=NOW, rng=random.Random()
    )
    assert decision.action == "stop"
    assert decision.not_before == NOW + 6.0
    assert "max_retry_after" in decision.reason


def test_polling_a_busy_server_costs_no_budget() -> None:
    in_progress = Classification(AttemptKind.IN_PROGRESS, retry=True, maybe_applied=True)
    decision = decide(
        POLICY, in_progress, attempts=1, remaining=60, server_wait=1.0, now=NOW, rng=random.Random()
    )
    assert decision.action == "retry"
    assert decision.cost == 0


def test_timeouts_cost_more_budget_than_throttles() -> None:
    rng = random.Random(1)
    throttled = decide(
        POLICY, THROTTLED, attempts=1, remaining=60, server_wait=None, now=NOW, rng=rng
    )
    timed_out = decide(
        POLICY, TIMED_OUT, attempts=1, remaining=60, server_wait=None, now=NOW, rng=rng
    )
    assert timed_out.cost > throttled.cost > 0


@given(
    attempts=st.integers(1, 20),
    remaining=st.floats(0, 100, allow_nan=False),
    server_wait=st.none() | st.floats(0, 1e6, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_a_retry_never_sleeps_past_the_deadline_nor_shortens_the_server_wait(
    attempts: int, remaining: float, server_wait: float | None, seed: int
) -> None:
    decision = decide(
        POLICY,
        THROTTLED,
        attempts=attempts,
        remaining=remaining,
        server_wait=server_wait,
        now=NOW,
        rng=random.Random(seed),
    )
    if decision.action == "retry":
        assert 0 <= decision.wait < remaining
        if server_wait is not None:
            assert decision.wait >= server_wait
    elif server_wait is not None:
        assert decision.not_before == NOW + server_wait  # a later resume honours it


def test_budget_runs_dry_and_refills() -> None:
    budget = RetryBudget(capacity=10, refund=1)
    assert budget.withdraw(5)
    assert budget.withdraw(5)
    assert not budget.withdraw(1)
    assert budget.tokens == 0
    budget.deposit()
    assert budget.tokens == 1
    for _ in range(100):
        budget.deposit()
    assert budget.tokens == 10  # never above capacity


def test_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="capacity"):
        RetryBudget(capacity=-1)
