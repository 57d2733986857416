"""`idemclient.postgres` exposes exactly its `__all__`, sorted."""

import types

import idemclient.postgres


def test_the_postgres_surface_is_exactly_all() -> None:
    public = {
        name
        for name, value in vars(idemclient.postgres).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(idemclient.postgres.__all__)
    assert idemclient.postgres.__all__ == [
        "DEFAULT_SCHEMA",
        "PostgresInbox",
        "PostgresInboxStorage",
        "PostgresStore",
        "asend_pending",
        "record_pending",
        "send_pending",
    ]
