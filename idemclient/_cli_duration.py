"""Durations the commands take (`--key-retention`, `--in-flight-for`): 30s, 5m, 6h, 7d,
or plain seconds, parsed in one place so that every command reads them alike."""

from __future__ import annotations

import math
import re

import click

__all__ = ["duration"]

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d)?")
_UNITS = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """A click callback: `value` in seconds (None when the option is not given). Anything
    but a positive, finite duration is refused, naming the value given."""
    if value is None:
        return None
    match = _DURATION.fullmatch(value.strip().lower())
    seconds = float(match.group(1)) * _UNITS[match.group(2)] if match else 0.0
    # A number of digits too long for a float reads as infinity: no duration either.
    if not match or not 0 < seconds < math.inf:
        raise click.BadParameter(f"{value!r}: give a positive duration such as 30s, 5m, 1h or 7d")
    return seconds
