"""PostgreSQL connections: what every PostgreSQL user in idemclient does the same way.

The store, the inbox and the reference server all name the database in messages
without its password (`display`), connect with the same arguments (`connect_args`),
open their tables on one plain connection before their pool (`open_then_pool`), so
that a wrong URL or foreign tables fail at once with their own message instead of in
the pool's reconnection loop, translate psycopg's errors at one boundary
(`pg_errors`), and keep a commit durable when the database runs with
``synchronous_commit = off`` (`durable_level`). The store's outbox and the inbox both
join a transaction that the application opened on its own connection, and check that
connection the same way before writing into it (`check_joinable`).

psycopg is an optional dependency: nothing imports this module until PostgreSQL is
asked for.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from .errors import pg_error
from .pg_schema import Layout, StoreIdentity, read_identity

__all__ = [
    "COMMIT_OFF",
    "COMMIT_ON",
    "Conn",
    "check_joinable",
    "check_quiet",
    "connect_args",
    "display",
    "durable_level",
    "open_then_pool",
    "pg_errors",
    "quoted",
    "with_lock_timeout",
]

T = TypeVar("T")

Conn = psycopg.Connection[Any]
Pool = psycopg_pool.ConnectionPool[Conn]

COMMIT_OFF = "SET LOCAL synchronous_commit = off"
COMMIT_ON = "SET LOCAL synchronous_commit = on"


def display(url: str) -> str:
    """The connection string without its password, for messages and `path`."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL connection string: {exc}") from None
    user = parts.get("user")
    host = parts.get("host") or "localhost"
    port = parts.get("port")
    database = parts.get("dbname") or user or ""
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{f'{user}@' if user else ''}{where}/{database}"


def quoted(schema: str) -> str:
    """`schema` as an SQL identifier, ready to prefix table names with."""
    return sql.Identifier(schema).as_string()


def connect_args(url: str, connect_timeout: float) -> dict[str, Any]:
    """Arguments for `psycopg.connect` and a pool: autocommit (transactions are
    explicit), and `connect_timeout` unless the URL sets its own."""
    args: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in conninfo_to_dict(url):
        args["connect_timeout"] = max(1, round(connect_timeout))
    return args


@contextlib.contextmanager
def pg_errors(where: str, schema: str) -> Iterator[None]:
    """psycopg's errors raised inside the block, as ours (see `errors.pg_error`)."""
    try:
        yield
    except psycopg.Error as exc:
        raise pg_error(where, schema, exc) from exc


def open_then_pool(
    url: str,
    *,
    prepare: Callable[[Conn], T],
    max_connections: int,
    connect_timeout: float,
    configure: Callable[[Conn], None],
    name: str,
    where: str,
    schema: str,
    check: Callable[[Conn], None] = psycopg_pool.ConnectionPool.check_connection,
) -> tuple[T, Pool]:
    """`prepare(conn)` on one plain connection (open and migrate the tables, read a
    setting), then a pool of up to `max_connections`, each connection set up by
    `configure` when made. psycopg's errors in connecting or preparing are ours.

    `check` runs on a connection each time the pool hands it out and raises if it is
    broken, so that it is replaced instead: by default an empty query (a round trip);
    `check_quiet` asks the socket instead."""
    kwargs = connect_args(url, connect_timeout)
    with pg_errors(where, schema), psycopg.connect(url, **kwargs) as conn:
        prepared = prepare(conn)
    pool: Pool = psycopg_pool.ConnectionPool(
        url,
        kwargs=kwargs,
        min_size=1,
        max_size=max_connections,
        timeout=connect_timeout,
        configure=configure,
        # A connection broken by a database restart is replaced, not handed out.
        check=check,
        name=name,
        open=True,
    )
    return prepared, pool


def check_quiet(conn: Conn) -> None:
    """A pool's check on handing out a connection, without a round trip while its
    socket is quiet.

    An idle connection has nothing to read. One the server has given up (a restart, a
    terminated backend) has: the server's last error message, or the end of the
    stream. Only then does the full check run (an empty query), which fails on such a
    connection, so that the pool replaces it instead of handing it out; a message that
    is harmless (a notice) is read by that query and the connection goes out."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    # poll, not select: select cannot take a descriptor at or above FD_SETSIZE (1024),
    # which a server holding many sockets hands its connections.
    waiting = select.poll()
    waiting.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    if waiting.poll(0):
        psycopg_pool.ConnectionPool.check_connection(conn)


def with_lock_timeout(seconds: float) -> Callable[[Conn], None]:
    """Set up a new pooled connection so that a statement waiting for a row that another
    transaction holds (an outbox operation not yet committed, a message id another
    delivery is processing) gives up after `seconds` instead of hanging; a thread that
    waits for its own open transaction would otherwise wait forever."""
    setting = f"{max(1, round(seconds * 1000))}ms"

    def configure(conn: Conn) -> None:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (setting,))

    return configure


def durable_level(conn: Conn) -> str | None:
    """What a commit that must survive a power loss sets first: nothing (the DBA's
    setting stands), unless the database runs with `synchronous_commit = off`."""
    setting = conn.execute("SHOW synchronous_commit").fetchone()
    return COMMIT_ON if setting is not None and setting[0] == "off" else None


def check_joinable(
    conn: object, schema: str, layout: Layout, identity: StoreIdentity, *, where: str, what: str
) -> None:
    """Refuse to write `what` through the application's `conn` unless it will commit
    together with the application's rows, in the database that holds our tables.

    `conn` must be a psycopg 3 connection, open, with a transaction open or one about
    to begin (not autocommit), not failed, not busy, to the database whose `schema`
    holds the tables `identity` names. Raises `TypeError` or `ValueError` saying which,
    having changed nothing (the look-up of our tables cannot fail the transaction).
    """
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(
            f"recording the {what} needs the psycopg (3) Connection of your transaction, not"
            f" {type(conn).__module__}.{type(conn).__qualname__}"
        )
    if conn.closed:
        raise ValueError("the connection is closed")
    status = conn.info.transaction_status
    if status is TransactionStatus.INERROR:
        raise ValueError(
            "the connection's transaction has failed already; roll it back: nothing"
            " of it (your rows included) can commit"
        )
    if status is TransactionStatus.IDLE and conn.autocommit:
        raise ValueError(
            f"the connection is in autocommit mode with no transaction open, so the"
            f" {what} would commit alone, apart from your own rows: record it inside"
            " `with conn.transaction(): ...` together with them"
        )
    if status not in (TransactionStatus.IDLE, TransactionStatus.INTRANS):
        raise ValueError(f"the connection is busy ({status.name}); wait for its result")
    name = sql.Identifier(schema).as_string(conn)
    with pg_errors(where, name):
        found = read_identity(conn, schema, where=where, layout=layout)
    if found is None or found.store_id != identity.store_id:
        there = f"another idemclient {layout.noun}" if found else f"no idemclient {layout.noun}"
        raise ValueError(
            f"the connection is to database {conn.info.dbname!r}, where schema"
            f" {name} holds {there}; this {layout.noun} is {where} (schema"
            f" {name}). Record the {what} through a connection to the"
            f" {layout.noun}'s own database."
        )
