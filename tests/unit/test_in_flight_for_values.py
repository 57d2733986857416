"""How long a server may still run a request (`Profile.in_flight_for`, `--in-flight-for`)
holds sends and look-ups back: a value that is no length of time must be refused where it
is given, never hold nothing (NaN, negative) nor crash later (infinity)."""

from __future__ import annotations

import math

import click
import pytest

from idemclient import profiles
from idemclient._cli_duration import duration
from idemclient._time import in_flight_until


@pytest.mark.parametrize(
    "value",
    [
        math.nan,  # compares false with every time: no hold at all, sent at once
        -1.0,  # a window that ends before the send: a "none" believed at once
        math.inf,  # a hold for ever, stored as infinity
    ],
)
def test_a_profile_refuses_an_in_flight_for_that_is_no_length_of_time(value: float) -> None:
    with pytest.raises(ValueError, match="in_flight_for"):
        profiles.reference.replace(in_flight_for=value)


def test_zero_and_any_finite_length_are_kept() -> None:
    assert profiles.reference.replace(in_flight_for=0.0).in_flight_for == 0.0
    assert in_flight_until(10.0, profiles.reference.replace(in_flight_for=60.0).in_flight_for) > 70


@pytest.mark.parametrize("given", ["9" * 400, "9" * 400 + "d"])
def test_a_duration_too_large_for_a_float_is_refused_not_taken_as_infinity(given: str) -> None:
    with pytest.raises(click.BadParameter, match="positive duration"):
        duration(click.Context(click.Command("x")), click.Option(["--x"]), given)
