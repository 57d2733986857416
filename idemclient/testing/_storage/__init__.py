"""The reference server's storage layer: what the phase machine asks of a database, and
the two databases that answer it.

- `backend.py`: the `StorageBackend` interface, and the backend chosen by `db`;
- `sqlite.py`, `postgres.py`: the two backends (the PostgreSQL key table partitioned by
  day);
- `transactions.py`: the transactions both backends run alike;
- `statements.py`: the SQL, written once for both dialects;
- `rows.py`: the row values both backends return.

Connections, migrations and error mapping come from the one database layer
(`idemclient._db`). Storage imports the protocol's rules and nothing else of the server.
"""
