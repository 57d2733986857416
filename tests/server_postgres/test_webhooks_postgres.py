"""The webhook outbox on PostgreSQL: queued in Handler3's transaction, claimed by one
deliverer, retried, misdelivered on purpose.

The bodies are tests/inbox/test_delivery.py's (see `reused.py`), with its `server`
fixture replaced by one on PostgreSQL; left out are the pure retry schedule, the
command line, the SQLite upgrade, and the tests that build an in-memory server of
their own.
"""

from collections.abc import Iterator

import pytest

from idemclient import ManualClock
from idemclient.testing import ReferenceServer
from tests.inbox import test_delivery
from tests.support.pgcluster import Cluster

from .reused import bodies_of

globals().update(
    bodies_of(
        test_delivery,
        leave_out=(
            "server",  # replaced below
            "test_the_retry_schedule_doubles_up_to_an_hour",
            "test_the_retry_schedule_counts_from_one",
            "test_an_event_is_abandoned_after_the_last_attempt",
            "test_the_sandbox_endpoints_drive_webhooks_over_http",
            "test_the_server_command_refuses_a_bad_webhook_url",
            "test_the_server_command_documents_its_webhook_options",
            "test_a_version_1_database_gains_the_webhook_table",
        ),
    )
)


# Session-wide: a database of this name exists once per cluster; a module fixture is set
# up again when the module's tests do not run together (another order), and would
# create it twice.
@pytest.fixture(scope="session")
def _webhooks_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("server_webhooks")


@pytest.fixture
def server(_webhooks_db: str) -> Iterator[ReferenceServer]:
    """A fresh server each time (endpoints are configuration and outlive `reset`)."""
    with ReferenceServer(db=_webhooks_db, clock=ManualClock()) as fresh:
        fresh.reset()
        yield fresh
