"""The one database layer every durable part of idemclient stands on.

Three features keep tables: the client store (`_store`), the webhook inbox (`inbox`,
`postgres._inbox`) and the reference server's storage (`testing`). Each keeps only its
own statements, rows and migrations; what talking to a database takes is here, once:

- `errors`: sqlite3's and psycopg's errors as idemclient's (`StoreUnavailable`,
  `StoreCorrupt`, ...), always raised `from` the driver's;
- `sqlite`: a SQLite file checked and connected (header, permissions, WAL, busy
  retries) and its write transactions;
- `postgres`: a PostgreSQL URL shown without its password, connected, pooled, its
  commit level, and the check of an application's connection joined by our writes;
- `dialect`: what differs between the two in the text of a statement;
- `versions`: the schema-version runner (append-only migrations, "too new" refused);
  `pg_schema`: the version table idemclient keeps beside its PostgreSQL tables.

psycopg is an optional dependency: only `postgres` and `pg_schema` import it, and
nothing imports them until PostgreSQL is asked for (see `POSTGRES_SCHEMES`).
"""

from __future__ import annotations

__all__ = ["INSTALL_POSTGRES", "POSTGRES_SCHEMES", "is_postgres_url", "postgres_missing"]

#: URL schemes that libpq accepts; any other string is the path of a SQLite file.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")

INSTALL_POSTGRES = "pip install 'idemclient[postgres]'"


def is_postgres_url(spec: object) -> bool:
    """Whether `spec` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(spec, str) and spec.startswith(POSTGRES_SCHEMES)


def postgres_missing(what: str, exc: ImportError) -> ImportError:
    """The error for `what` asked of PostgreSQL without psycopg installed."""
    return ImportError(
        f"{what} needs psycopg 3 and psycopg-pool, which are not installed ({exc});"
        f" install them with: {INSTALL_POSTGRES}"
    )
