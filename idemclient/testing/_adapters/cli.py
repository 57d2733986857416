"""`idemclient server`: the reference server on a real socket, until SIGTERM or SIGINT.

Binds 127.0.0.1 by default (the `/_sandbox/` controls take no authentication), keeps
its state in SQLite (in memory unless `--db` names a file) or in PostgreSQL (`--db
postgresql://...`, where several servers may share one database), runs the recovery
worker, the reaper and the webhook delivery loop in the background, and prints one
line once it accepts connections:

    idemclient reference server listening on http://127.0.0.1:8000

On SIGTERM or SIGINT it stops accepting, lets requests in progress finish (a few
seconds at most), closes the database and exits 0.
"""

from __future__ import annotations

import signal
import sqlite3
from types import FrameType

import click

from ...clock import SystemClock
from ...profiles import BUILTIN
from .._server import DEFAULT_CLOCK_TOLERANCE, DEFAULT_KEY_TTL, DEFAULT_LEASE, ReferenceServer
from .._storage.backend import is_postgres_url
from .asgi import ReferenceApp

__all__ = ["server"]

_POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port to bind; 0 picks a free one (the ready line says which).",
)
@click.option(
    "--db",
    default=":memory:",
    show_default=True,
    help=(
        "SQLite database file (:memory: keeps nothing after exit), or a postgresql:// URL"
        " (several servers may share it)."
    ),
)
@click.option(
    "--lease",
    type=_POSITIVE,
    default=DEFAULT_LEASE,
    show_default=True,
    help="Seconds an attempt may go silent before its request may be taken over.",
)
@click.option(
    "--key-ttl",
    type=_POSITIVE,
    default=None,
    help="Seconds finished idempotency keys are kept before the reaper drops them"
    f" [default: the profile's longest key retention; {DEFAULT_KEY_TTL:.0f} for reference].",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(list(BUILTIN)),
    default="reference",
    show_default=True,
    help="The server profile to speak: where the key goes, and each answer, as that"
    " provider gives it.",
)
@click.option(
    "--clock-tolerance",
    type=click.FloatRange(min=0),
    default=DEFAULT_CLOCK_TOLERANCE,
    show_default=True,
    help="Seconds the clocks of servers sharing the database may disagree: keys are"
    " kept this much longer than --key-ttl.",
)
@click.option(
    "--external-retention",
    type=_POSITIVE,
    default=None,
    help="Seconds the simulated external systems honour a key (default: for ever).",
)
@click.option(
    "--recovery-interval",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between background recovery sweeps and reaps; 0 disables them.",
)
@click.option(
    "--webhook-url",
    default=None,
    help="Deliver every client's webhook events here (also settable via /_sandbox/).",
)
@click.option(
    "--webhook-secret",
    "webhook_secrets",
    multiple=True,
    help="A secret to sign webhooks with (whsec_ and base64); repeat it during a rotation."
    " Without one, a secret is generated when the server starts with --webhook-url, and"
    " printed to stderr as 'webhook signing secret: whsec_...' (stdout keeps the one ready"
    " line); an endpoint set later through POST /_sandbox/webhooks/endpoint without"
    " secrets gets one generated then, in that call's answer.",
)
@click.option(
    "--webhook-interval",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between passes of the webhook delivery loop; 0 disables it.",
)
@click.option(
    "--sandbox/--no-sandbox",
    default=True,
    show_default=True,
    help="Serve the unauthenticated /_sandbox/ fault and inspection endpoints.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
def server(
    host: str,
    port: int,
    db: str,
    lease: float,
    key_ttl: float | None,
    profile_name: str,
    clock_tolerance: float,
    external_retention: float | None,
    recovery_interval: float,
    webhook_url: str | None,
    webhook_secrets: tuple[str, ...],
    webhook_interval: float,
    sandbox: bool,
    log_level: str,
) -> None:
    """Run the reference server: the server half of the idempotency protocol."""
    from .live import bind, make_uvicorn_server, require_uvicorn, url_for

    try:
        require_uvicorn()
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    try:
        reference = ReferenceServer(
            db=db,
            clock=SystemClock(),
            lease=lease,
            key_ttl=key_ttl,
            clock_tolerance=clock_tolerance,
            external_retention=external_retention,
            sandbox=sandbox,
            profile=profile_name,
        )
    except (sqlite3.Error, ValueError, OSError, ImportError) as exc:
        # OSError: a PostgreSQL database that cannot be reached or used (ConnectionError);
        # ImportError: a postgresql:// URL without the postgres extra installed.
        sock.close()
        # A URL may carry a password: the storage's own message names it without one.
        where = "" if is_postgres_url(db) else f" {db!r}"
        raise click.ClickException(f"cannot open the database{where}: {exc}") from exc
    if webhook_url is not None:
        try:
            chosen = reference.set_webhook_endpoint(webhook_url, secrets=webhook_secrets or None)
        except ValueError as exc:
            sock.close()
            reference.close()
            raise click.ClickException(str(exc)) from exc
        if not webhook_secrets:
            # stderr: stdout carries exactly one line, the ready line.
            click.echo(f"webhook signing secret: {chosen[0]}", err=True)
    url = url_for(sock)

    def ready() -> None:
        click.echo(f"idemclient reference server listening on {url}")

    app = ReferenceApp(
        reference,
        recovery_interval=recovery_interval or None,
        webhook_interval=webhook_interval or None,
        on_ready=ready,
    )
    uv = make_uvicorn_server(app, log_level=log_level, configure_logging=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        # uvicorn handles these signals while it runs and re-raises them after its
        # graceful shutdown; landing here then means "already stopped, exit 0". A signal
        # that arrives before uvicorn took over makes it stop as soon as it starts.
        uv.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uv.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        reference.close()
    click.echo("idemclient reference server stopped", err=True)
