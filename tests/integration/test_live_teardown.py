"""A live reference server holding a delayed answer does not hold up the test's end.

A `delay` fault longer than the client waits is the usual way to make an applied
request time out. Over a socket the server really waits; the client gives up and closes
its connection, and the held answer ends there (nobody is left to read it): the server
shuts down at once instead of waiting out the delay, or uvicorn's five seconds of
graceful shutdown.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from idemclient import Client, Indeterminate, RetryPolicy
from idemclient.testing import serve


def test_a_delayed_answer_the_client_gave_up_on_does_not_hold_up_the_teardown(
    tmp_path: Path,
) -> None:
    with serve() as live:
        live.server.delay(60.0)
        with (
            Client(
                base_url=live.url,
                headers={"Authorization": "Bearer shop-1"},
                store=tmp_path / "s.db",
                policy=RetryPolicy(max_attempts=1, attempt_timeout=0.3, deadline=5.0),
            ) as client,
            pytest.raises(Indeterminate),
        ):
            client.post(
                "/v1/payments",
                json={"amount": 700, "currency": "EUR", "reference": "inv-1"},
                operation_id="inv-1",
            )
        applied = [entry for entry in live.server.ledger() if entry.status == "succeeded"]
        assert len(applied) == 1  # applied; only its answer was held
        ending = time.monotonic()
    # Measured at 0.2 s (5.2 s before: the server waited for the held answer to end).
    # The bound leaves room for a loaded machine and none for uvicorn's 5 s.
    assert time.monotonic() - ending < 1.5
