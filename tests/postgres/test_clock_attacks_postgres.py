"""Clock histories on a PostgreSQL store shared by hosts (as in
tests/client/test_clock_attacks.py)."""

from __future__ import annotations

import pytest

from ..client.test_clock_attacks import two_hosts_one_fast_that_goes_away


@pytest.mark.xfail(
    strict=True, reason="a record seen ahead of a running client's clock is not kept"
)
def test_a_host_that_never_restarts_keeps_a_record_a_fast_host_made(pg_url: str) -> None:
    psp = two_hosts_one_fast_that_goes_away(pg_url)
    assert sum(psp.effects.values()) == 1
