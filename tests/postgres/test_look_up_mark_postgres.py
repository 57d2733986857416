"""Two hosts of one PostgreSQL store during an upgrade: one runs this version, whose
look-ups take a lease of their own kind (`lease_look_up`); the other still runs the
previous version, whose statements know no such mark. A lease on an operation in
flight is a send's, whatever the mark says."""

from __future__ import annotations

import psycopg

from idemclient import State
from idemclient._store import new_owner, release_owner
from idemclient.postgres import PostgresStore

from ..store.conftest import NOW, make_intent


def test_an_older_host_s_send_over_a_dead_look_up_is_read_as_a_send(pg_url: str) -> None:
    with PostgresStore(pg_url) as store:
        intent = make_intent()
        store.begin(intent, owner="gone:1:t:1", now=NOW, lease_until=NOW + 1)
        looker = new_owner()
        looked = store.claim(
            intent.operation_id, owner=looker, now=NOW + 5, lease_until=NOW + 15, look_up=True
        )
        release_owner(looker)  # this host's look-up is gone
        assert looked.record.lease_look_up
        assert looked.record.state is State.INDETERMINATE  # taken from a sender in flight
    # The previous version's takeover on the other host: in flight under its sender
    # (the mark untouched), which dies before it can say anything.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE idemclient.operations SET state = 'in_flight',"
            " lease_owner = 'old-host:7:t:1', lease_expires = %s, updated_at = %s"
            " WHERE id = %s",
            (NOW + 60, NOW + 20, intent.operation_id),
        )
    with PostgresStore(pg_url) as store:
        held = store.get(intent.operation_id)
        assert held is not None
        taken = store.claim(
            intent.operation_id, owner=new_owner(), now=NOW + 100, lease_until=NOW + 200
        )
    assert held.lease_look_up is False, "a lease in flight is a send's"
    assert taken.taken_over
    assert (taken.record.maybe_applied, taken.record.sent_at) == (True, NOW + 60)
