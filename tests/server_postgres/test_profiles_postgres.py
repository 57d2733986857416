"""Server profiles on PostgreSQL: what a profile adds to the storage (forgetting a key
past its retention, or after an answer the provider does not keep, and a second run
beside one in flight) behaves as on SQLite."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.pgcluster import Cluster

from ..profiles.server_speakers import BODY, Speaker, in_process, uuid_key

KEY = uuid_key(21)


# Session-wide: a database of this name exists once per cluster; a module fixture is set
# up again when the module's tests do not run together (another order), and would
# create it twice.
@pytest.fixture(scope="session")
def profiles_db(pg_cluster: Cluster) -> str:
    return pg_cluster.create_database("server_profiles")


@pytest.fixture
def speak(profiles_db: str) -> Iterator[Callable[[str], Speaker]]:
    opened: list[Speaker] = []

    def open_(name: str) -> Speaker:
        speaker = in_process(name, db=profiles_db)
        speaker.server.reset()
        opened.append(speaker)
        return speaker

    yield open_
    for speaker in opened:
        speaker.server.reset()
        speaker.stack.close()


def test_mollie_forgets_a_key_after_an_hour(speak: Callable[[str], Speaker]) -> None:
    speaker = speak("mollie")
    first = speaker.post(KEY)
    speaker.server.advance(3599)
    assert speaker.post(KEY).headers["idempotent-replayed"] == "true"
    speaker.server.advance(2)
    again = speaker.post(KEY)
    assert again.status_code == 201
    assert again.json()["id"] != first.json()["id"]
    assert [e.key_state for e in speaker.server.ledger()] == [None, "finished"]


def test_checkout_keeps_only_2xx(speak: Callable[[str], Speaker]) -> None:
    speaker = speak("checkout")
    speaker.server.external_fault(1, "decline")
    assert speaker.post(KEY).status_code == 402
    assert speaker.server.key_record("alice", KEY) is None
    assert speaker.post(KEY).status_code == 402
    assert len(speaker.server.ledger()) == 2


def test_django_runs_a_duplicate_and_replays_with_409(speak: Callable[[str], Speaker]) -> None:
    speaker = speak("django-idempotency-key")
    speaker.server.crash("H1_DONE")
    with pytest.raises(httpx.RemoteProtocolError):
        speaker.post(KEY)
    beside = speaker.post(KEY)
    assert beside.status_code == 201
    assert len(speaker.server.ledger()) == 2
    other = speaker.post(KEY, {**BODY, "amount": 7})
    assert other.status_code == 201
    assert speaker.post(KEY, {**BODY, "amount": 7}).status_code == 409
    assert len(speaker.server.ledger()) == 3
