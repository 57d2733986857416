"""The database down: a quick problem+json with Retry-After, never a bare 500 after 10 s.

With PostgreSQL stopped, a request waited for a pooled connection for the whole
connect timeout (10 s) and was answered by uvicorn's text/plain 500, without
Retry-After: a client, whose own timeout is usually shorter, saw a timeout on a
request that may look applied. Now a request that gets no connection within
`ACQUIRE_TIMEOUT` (3 s) is answered 503 problem+json with Retry-After: nothing was done.
One the database is lost under, after its key was admitted, is answered 500
problem+json with Retry-After (it may have been applied), and is finished once, by a
retry or the recovery worker, when the database is back.

Each test stops and restarts a PostgreSQL of its own (the session's is shared): the
only waits are the server's own bound, measured, and PostgreSQL's start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from idemclient import ManualClock
from idemclient.testing import ReferenceServer, serve
from idemclient.testing._storage.postgres import ACQUIRE_TIMEOUT
from tests.support.pgcluster import Cluster

from ..server.server_helpers import BODY

PROBLEM = "application/problem+json"
AUTH = {"Authorization": "Bearer alice"}
#: What the answer may take beyond the server's bound: the request's own work, on a
#: machine shared with other test runs.
SLACK = 1.5


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    own = Cluster()
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def database(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    url = cluster.create_database(f"down_{request.node.name[-40:].lower()}".replace("-", "_"))
    yield url
    if not cluster._started:  # a failed test left it stopped
        cluster.resume()


def _post(client: httpx.Client, key: str, reference: str = "inv-1") -> httpx.Response:
    body = {**BODY, "reference": reference}
    return client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})


def _timed(call: object) -> tuple[httpx.Response, float]:
    assert callable(call)
    started = time.monotonic()
    response = call()
    assert isinstance(response, httpx.Response)
    return response, time.monotonic() - started


def _until_back(client: httpx.Client, key: str, reference: str) -> httpx.Response:
    """The same request again until the server has its database back: each attempt
    bounded by the server's own wait, at most a few (the pool reconnects with backoff)."""
    for _ in range(12):
        response = _post(client, key, reference)
        if response.status_code != 503:
            return response
    raise AssertionError(f"still 503 after the database came back: {response.text}")


def test_with_the_database_down_the_answer_is_a_quick_503_problem_with_retry_after(
    cluster: Cluster, database: str
) -> None:
    with (
        ReferenceServer(db=database) as server,
        serve(server) as live,
        httpx.Client(base_url=live.url, headers=AUTH, timeout=30) as client,
    ):
        assert _post(client, "k-1").status_code == 201
        cluster.halt()
        answers = [
            _timed(lambda: _post(client, "k-2", "inv-2")),  # a new key
            _timed(lambda: _post(client, "k-1")),  # a replay
            _timed(lambda: client.get("/v1/payments", params={"reference": "inv-1"})),
            _timed(lambda: client.get("/_sandbox/ledger")),  # the controls too
        ]
        for response, elapsed in answers:
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == PROBLEM
            assert response.headers["retry-after"] == "5"
            problem = response.json()
            assert problem["type"] == "urn:idemclient:problem:storage-unavailable"
            assert "nothing was done" in problem["detail"]
            # The database's own words (host, port, errors) stay in the server's log.
            assert str(cluster.port) not in response.text
            assert "connection" not in problem["detail"]
            assert elapsed < ACQUIRE_TIMEOUT + SLACK, f"answered after {elapsed:.1f} s"
        cluster.resume()
        # The same key again, once the database is back: paid once.
        paid = _until_back(client, "k-2", "inv-2")
        assert paid.status_code == 201, paid.text
        assert _post(client, "k-2", "inv-2").content == paid.content
        entries = {e.idempotency_key: e for e in server.ledger()}
        assert sorted(entries) == ["k-1", "k-2"]
        assert {(e.ext1_applied, e.ext2_applied) for e in entries.values()} == {(1, 1)}


def test_the_database_lost_after_admission_is_a_500_problem_and_finished_once_later(
    cluster: Cluster, database: str
) -> None:
    clock = ManualClock()
    with ReferenceServer(db=database, clock=clock) as server:
        client = httpx.Client(transport=server.transport, base_url="http://psp.test", headers=AUTH)
        gate = server.hold_external(2)  # the request is in flight past external system 1
        answer: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: answer.append(_post(client, "k-1")))
        sender.start()
        assert gate.wait_until_reached(10)
        cluster.halt()
        gate.release()  # external system 2 applies it; recording that finds no database
        sender.join(timeout=ACQUIRE_TIMEOUT + 10)
        [lost] = answer
        assert lost.status_code == 500, lost.text
        assert lost.headers["content-type"] == PROBLEM
        assert lost.headers["retry-after"] == "5"
        problem = lost.json()
        assert problem["type"] == "urn:idemclient:problem:storage-lost"
        assert "may have been applied" in problem["detail"]
        cluster.resume()
        # The key is started, its lease held by the attempt that lost the database:
        # once it lapses, the recovery worker finishes the payment, once.
        clock.advance(server.lease + 1)
        for _ in range(12):
            try:
                report = server.recover()
            except Exception:  # the pool still reconnecting: bounded by its own wait
                continue
            break
        assert report.finished == 1
        replay = _post(client, "k-1")
        assert replay.status_code == 201, replay.text
        [entry] = server.ledger()
        assert (entry.ext1_applied, entry.ext2_applied, entry.key_state) == (1, 1, "finished")
