"""docs/profiles.md's first table is the built-in profiles' facts: read it and compare,
so that the page and the code cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from idemclient import profiles
from idemclient.profiles import KeyFormat, KeySlot, Profile

PAGE = Path(__file__).resolve().parents[2] / "docs" / "profiles.md"


def _rows() -> dict[str, list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("| profile | key goes in |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _slot(slot: KeySlot) -> str:
    if slot.header is not None:
        return f"header `{slot.header}`" + (" (quoted string)" if slot.quoted else "")
    return f"JSON body field `{slot.field}`"


def _format(found: KeyFormat) -> str:
    if found.described == "a UUID":
        return "a UUID"
    text = f"{found.min_length}-{found.max_length}"
    if found.pattern is not None:
        return f"{text} of `{found.described.split(' of ', 1)[1]}`"
    return text


def _duration(seconds: float) -> str:
    if seconds % 86400 == 0 and seconds > 86400:
        return f"{int(seconds // 86400)} d"
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds)} s"


def test_every_builtin_profile_has_a_row_and_no_other() -> None:
    assert list(_rows()) == list(profiles.BUILTIN)


@pytest.mark.parametrize("name", list(profiles.BUILTIN))
def test_the_row_says_what_the_profile_does(name: str) -> None:
    profile: Profile = profiles.BUILTIN[name]
    key, key_format, retention, endpoints = _rows()[name]
    assert key == _slot(profile.key)
    assert key_format == _format(profile.key_format)
    assert retention == _duration(profile.key_retention) + (
        "" if profile.retention_published else " (assumed)"
    )
    for endpoint in profile.endpoints:
        # Every endpoint that differs is named in the row, with what differs.
        if endpoint.key is not None:
            assert _slot(endpoint.key) in endpoints, endpoint
        if endpoint.key_retention is not None and endpoint.key_retention != profile.key_retention:
            assert _duration(endpoint.key_retention) in endpoints, endpoint
        if endpoint.key_format is not None and endpoint.key_format != profile.key_format:
            assert re.search(rf"\b{_format(endpoint.key_format)}\b", endpoints), endpoint
    if not profile.endpoints:
        assert endpoints == ""


def _hosts_rows() -> dict[str, set[str]]:
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("| profile | production hosts |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", " ".join(cells[1:])))
    return rows


def test_the_known_hosts_table_names_each_profile_s_hosts_and_no_other() -> None:
    named = {name: set(p.hosts) for name, p in profiles.BUILTIN.items() if p.hosts}
    assert _hosts_rows() == named
