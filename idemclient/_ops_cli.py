"""`idemclient ops`: see and finish what a store holds."""

from __future__ import annotations

import contextlib
import datetime
import json
import sys
from pathlib import Path

import click
import httpx

from . import Client, State, _cli_errors
from ._cli_duration import duration
from ._cli_options import (
    JSON_OPTION,
    PROFILE_BY_HOST_OPTION,
    RELIABLE_404_HELP,
    SERVER_CLOCK_OPTION,
    STATUS_HELP,
    VERBOSE_OPTION,
    parse_statuses,
    retry_line,
    styled_state,
)
from ._cli_store import STORE_HELP, StoreLocation, describe_missing
from ._errors import OutcomeError, StoreError
from ._ops_lines import fields, line_width, listed, record_json
from ._seam import open_store
from .hooks import Hooks
from .profiles import BUILTIN, DEFAULT, Profile
from .store import AdminStore, OperationRecord

__all__ = ["ops"]

_STORE = click.option(
    "--store",
    default="idemclient.db",
    show_default=True,
    type=StoreLocation(),
    help=STORE_HELP,
)


def _echo_json(document: object) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


@click.group()
def ops() -> None:
    """See and finish the operations a store holds."""


def _open(store: Path | str) -> contextlib.closing[AdminStore]:
    missing = describe_missing(store)
    if missing is not None:
        _fail(missing)
    try:
        return contextlib.closing(open_store(store))
    except (StoreError, ImportError) as exc:
        _fail(str(exc))


_fail = _cli_errors.fail


@ops.command("list")
@_STORE
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in State]),
    help="Only these states (repeatable). [default: all]",
)
@click.option("--unfinished", is_flag=True, help="Only operations without a final answer.")
@click.option(
    "--batch",
    "batch_ref",
    default=None,
    help="Only the rows `batch submit` recorded whose reference begins with this: a"
    " scope given to --batch-ref (2026-11), or the start a file's references share.",
)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="List at most this many.",
)
@JSON_OPTION
def list_command(
    store: Path | str,
    states: tuple[str, ...],
    unfinished: bool,
    batch_ref: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """One line per operation, oldest first, and a count per state.

    A line is the operation's id (what `ops show` takes), its state, attempts, when it
    was last updated and its evidence, cut to fit the terminal (120 columns outside
    one); `ops show` tells the rest. A list cut at --limit says so. With --json: one
    JSON object, {"operations": [...], "counts": {state: n}, "truncated": bool}.
    """
    prefixes = {} if batch_ref is None else {"id_prefix": "batch/", "reference_prefix": batch_ref}
    fetch = limit + 1  # one more than listed: a list cut at --limit says so
    with _open(store) as opened:
        try:
            if unfinished and not prefixes and not states:
                records = opened.unfinished(limit=fetch)
            else:
                chosen = [State(s) for s in states] if states else list(State)
                if unfinished:  # within the states asked for, if any
                    chosen = [s for s in chosen if not s.finished]
                records = (
                    opened.operations(states=chosen, limit=fetch, **prefixes) if chosen else []
                )
            counts = opened.counts(**prefixes)
        except StoreError as exc:  # an encrypted store, say: named, never garbage
            _fail(str(exc))
    truncated = len(records) > limit
    records = records[:limit]
    if as_json:
        _echo_json(
            {
                "operations": [record_json(record) for record in records],
                "counts": {state.value: n for state, n in counts.items()},
                "truncated": truncated,
            }
        )
        return
    width = line_width()
    for record in records:
        click.echo(listed(record, width))
    if truncated:
        click.echo(
            f"the first {limit} listed, more not listed: raise --limit, or narrow the list"
            " (--state, --unfinished, --batch)",
            err=True,
        )
    click.echo(", ".join(f"{state.words} {n}" for state, n in counts.items()), err=True)


@ops.command("show")
@_STORE
@click.argument("operation_id")
@JSON_OPTION
def show_command(store: Path | str, operation_id: str, as_json: bool) -> None:
    """Everything the store holds about one operation (no secrets are ever stored)."""
    with _open(store) as opened:
        try:
            record = opened.get(operation_id) or opened.get_by_key(operation_id)
        except StoreError as exc:
            _fail(str(exc))
    if record is None:
        _fail(f"no operation {operation_id!r} in {store}")
    if as_json:
        document = record_json(record)
        document["body"] = record.body.decode("utf-8", "replace")
        document["response"] = None  # no final answer stored: null, never a missing key
        if record.response is not None:
            document["response"] = {
                "status": record.response.status_code,
                "body": None
                if record.response.body_omitted
                else record.response.body.decode("utf-8", "replace"),
                "body_omitted": record.response.body_omitted,
                "body_size": record.response.body_size,
                "body_sha256": record.response.body_sha256,
            }
        _echo_json(document)
        return
    shown = fields(record)
    width = max(len(name) for name, _ in shown)  # every label right-aligned, the longest too
    for name, value in shown:
        if name == "state":
            value = styled_state(record.state)
        click.echo(f"{name:>{width}}: {value}")


@ops.command("resume")
@_STORE
@click.option(
    "--token",
    required=True,
    envvar="IDEMCLIENT_TOKEN",
    show_envvar=True,
    help="Bearer token (never written to the store).",
)
@click.option(
    "--url",
    default=None,
    help="Resume only the operations sent to this origin (the PSP's base URL), whose"
    " credential --token is. Needed when the store holds operations of more than one"
    " origin: one token is never sent to another origin's host.",
)
@click.option("--limit", default=None, type=click.IntRange(min=1), help="Resume at most this many.")
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(list(BUILTIN)),
    default=None,
    help="Resume only the operations sent under this server profile (default: each under"
    " the profile it was sent under).",
)
@SERVER_CLOCK_OPTION
@PROFILE_BY_HOST_OPTION
@VERBOSE_OPTION
def resume_command(
    store: Path | str,
    token: str,
    url: str | None,
    limit: int | None,
    profile_name: str | None,
    server_clock: bool,
    profile_by_host: bool,
    verbose: bool,
) -> None:
    """Finish unfinished operations with their original keys, after a crash.

    Exit 0 when every one is settled now, 3 when some are still unsettled, 4 when some
    were refused.
    """
    missing = describe_missing(store)
    if missing is not None:
        _fail(missing)
    if url is None:
        origins = _origins_unfinished(store, profile_name)
        if len(origins) > 1:
            # One token is one origin's credential: sent with each operation to its own
            # origin, it would reach every other origin's host too.
            _fail(
                f"the store's unfinished operations were sent to {len(origins)} origins"
                f" ({', '.join(origins)}), and --token is one credential: pass --url with"
                " the origin it is for, once per origin. Nothing was sent"
            )
    outcomes = []
    left = limit  # --limit counts the operations resumed, of every profile together
    for name in [profile_name] if profile_name else _profiles_unfinished(store):
        if left == 0:
            break
        try:
            client = Client(
                store=store,
                base_url=url or "",
                headers={"Authorization": f"Bearer {token}"},
                hooks=_verbose_hooks() if verbose else None,
                profile=name,
                server_clock=server_clock,
                time_probe=server_clock,
                profile_by_host=profile_by_host,
            )
        except (StoreError, ImportError, ValueError) as exc:
            _fail(str(exc))
        with client:
            try:
                unfinished = client.store.unfinished()
                mine = {r.operation_id for r in unfinished if _under(r, name)}
                reach = None
                if left is not None:
                    # The resume takes the oldest unfinished operations of any profile,
                    # refusing (sending nothing of) another profile's: it reaches as far
                    # as this profile's `left` oldest.
                    ours = [n for n, r in enumerate(unfinished) if r.operation_id in mine][:left]
                    mine = {unfinished[n].operation_id for n in ours}
                    reach = ours[-1] + 1 if ours else 0
                resumed = (
                    [o for o in client.resume(limit=reach) if o.operation_id in mine]
                    if reach != 0
                    else []
                )
                outcomes += resumed
                left = None if left is None else left - len(resumed)
            except StoreError as exc:
                _fail(str(exc))
    for outcome in outcomes:
        click.echo(f"{outcome.operation_id}  {styled_state(outcome.state, 13)} {outcome.evidence}")
    states = {o.state for o in outcomes}
    click.echo(f"resumed {len(outcomes)} operation(s)", err=True)
    if states - {State.SUCCEEDED, State.FAILED}:
        sys.exit(3)
    sys.exit(4 if State.FAILED in states else 0)


def _verbose_hooks() -> Hooks:
    return Hooks(
        on_retry=lambda event: click.echo(click.style(retry_line(event), fg="yellow"), err=True)
    )


def _under(record: OperationRecord, profile: str) -> bool:
    return (record.profile or DEFAULT.name) == profile


def _origins_unfinished(store: Path | str, profile: str | None) -> list[str]:
    """The origins (scheme, host, port) the store's unfinished operations were sent to,
    of `profile`'s if given."""
    with _open(store) as opened:
        found = {
            _origin(record.url)
            for record in opened.unfinished()
            if profile is None or _under(record, profile)
        }
    return sorted(found)


def _origin(url: str) -> str:
    parsed = httpx.URL(url)
    port = "" if parsed.port is None else f":{parsed.port}"
    return f"{parsed.scheme}://{parsed.host}{port}"


def _profiles_unfinished(store: Path | str) -> list[str]:
    """The built-in profiles the store's unfinished operations were sent under."""
    with _open(store) as opened:
        found = {record.profile or DEFAULT.name for record in opened.unfinished()}
    unknown = sorted(found - set(BUILTIN))
    if unknown:
        _fail(
            f"operations were sent under profiles of the application's own"
            f" ({', '.join(unknown)}): resume them from the application"
            " (client.resume()), or pass --profile for the built-in ones"
        )
    return sorted(found) or [DEFAULT.name]


def _judged_by(profile: Profile, in_flight_for: float | None) -> Profile:
    """`profile`, with the operator's `--in-flight-for` if given."""
    return profile if in_flight_for is None else profile.replace(in_flight_for=in_flight_for)


@ops.command("reconcile")
@_STORE
@click.argument("operation_id")
@click.option(
    "--url",
    required=True,
    envvar="IDEMCLIENT_URL",
    show_envvar=True,
    help="The PSP's base URL.",
)
@click.option(
    "--token",
    required=True,
    envvar="IDEMCLIENT_TOKEN",
    show_envvar=True,
    help="Bearer token (never written to the store).",
)
@click.option(
    "--lookup",
    default=None,
    help="Where to look it up, with {reference} or {key}: e.g. /v1/payments?reference={reference};"
    " a leading {path} is the operation's own URL. [default: the server profile's look-up, if"
    " it has one; for a row of batch submit, the batch's: {path}?reference={reference}]",
)
@click.option("--status", "statuses", multiple=True, callback=parse_statuses, help=STATUS_HELP)
@click.option("--reliable-404", is_flag=True, help=RELIABLE_404_HELP)
@click.option(
    "--in-flight-for",
    default=None,
    callback=duration,
    help="How long the server may still be running a request after it was sent (its own"
    " request timeout, a crash and its recovery), if you know better than the operation's"
    " profile (default: the profile's, 15m). Until then, and for the clock skew allowed"
    " between the store's hosts (5m) after it, a look-up that finds nothing leaves an"
    " operation that may have been applied unsettled. 30s, 5m, or seconds.",
)
def reconcile_command(
    store: Path | str,
    operation_id: str,
    url: str,
    token: str,
    lookup: str | None,
    statuses: dict[str, State] | None,
    reliable_404: bool,
    in_flight_for: float | None,
) -> None:
    """Settle an unfinished operation by looking it up on the server, never re-sending it.

    Exit 0 when settled (succeeded; failed, for a payment the server declined, or for
    an answer read as a replay that no attempt explained when a look-up by reference
    finds no payment: the application's refusal; or not sent and safe to send again), 3
    when the look-up could not tell.
    """
    missing = describe_missing(store)
    if missing is not None:
        _fail(missing)
    with _open(store) as opened:
        try:
            known = opened.get(operation_id) or opened.get_by_key(operation_id)
        except StoreError as exc:
            _fail(str(exc))
    if known is None:  # a mistyped id: said so, before any look-up is chosen or sent
        _fail(f"no operation {operation_id!r} in {store}")
    operation_id = known.operation_id  # given by its key, as `ops show` takes it
    profile = known.profile or DEFAULT.name
    if profile not in BUILTIN:
        # Its server's in_flight_for (how long a "not found" is too early to believe),
        # its look-up and its statuses are the application's: judged by the default's,
        # a payment its server was still running was settled not_sent.
        _fail(
            f"operation {operation_id!r} was sent under the application's own profile"
            f" {profile!r}: reconcile it from the application (client.reconcile())"
        )
    try:
        client = Client(
            store=store,
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            profile=_judged_by(BUILTIN[profile], in_flight_for),
        )
    except (StoreError, ImportError) as exc:
        _fail(str(exc))
    lookup = _lookup_for(known, lookup, BUILTIN[profile])
    with client:
        try:
            outcome = client.reconcile(
                operation_id, lookup=lookup, statuses=statuses, reliable_404=reliable_404
            )
        except ValueError as exc:
            _fail(str(exc))
        except OutcomeError as exc:
            click.echo(str(exc), err=True)
            sys.exit(3)
    click.echo(f"{outcome.operation_id}  {outcome.state.value:<13} {outcome.evidence}")


def _lookup_for(record: OperationRecord, given: str | None, profile: Profile) -> str | None:
    """The look-up `ops reconcile` asks for `record`: the one given; else the profile's
    (None: `Client.reconcile` takes it); else, for a row of `batch submit`, the batch's
    default. Refused, said in this command's words, when there is none, or when the
    profile's does not find this operation's resource."""
    from .batch._identity import is_batch_operation
    from .batch._lookup import DEFAULT_LOOKUP

    if given is not None:
        return given
    path = httpx.URL(record.url).path
    profiled = profile.lookup
    if profiled is not None:
        if profiled.covers_path(path):
            return None
        _fail(
            f"the {profile.name} profile's look-up ({profiled.template}) does not find"
            f" {record.method} {path}: give --lookup with {{reference}} or {{key}}, a URL"
            " of the server that finds this operation's resource; nothing was looked up"
        )
    if not is_batch_operation(record.operation_id):
        _fail(
            f"the {profile.name} profile knows no look-up: give --lookup with {{reference}}"
            " or {key}, e.g. --lookup '/v1/payments?reference={reference}' (a leading"
            " {path} is the operation's own URL); nothing was looked up"
        )
    return DEFAULT_LOOKUP  # what `batch submit` looked its rows up with by default


@ops.command("purge")
@_STORE
@click.option(
    "--older-than",
    type=click.FloatRange(min=0),
    default=None,
    help="Purge finished operations older than this many days.",
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Purge without asking. On a terminal, purge asks first; a script should say --yes.",
)
@click.argument("operation_ids", nargs=-1)
def purge_command(
    store: Path | str, older_than: float | None, operation_ids: tuple[str, ...], yes: bool
) -> None:
    """Delete finished operations (by id, or by age). Unfinished ones are never deleted.

    With a terminal to answer on (stdin), it asks before deleting anything, unless --yes
    is given; the question goes to stderr, so `... | tee log` still asks. Without one (a
    script) it purges as earlier versions did, with a warning: a later version will
    refuse there without --yes.
    """
    if (older_than is None) == (not operation_ids):
        _fail("give operation ids or --older-than, not both and not neither")
    with _open(store) as opened:
        try:
            if operation_ids:
                chosen = list(operation_ids)
            else:
                assert older_than is not None
                cutoff = datetime.datetime.now(datetime.UTC).timestamp() - older_than * 86400
                chosen = [
                    r.operation_id
                    for r in opened.operations(states=[State.SUCCEEDED, State.FAILED])
                    if r.finished_at is not None and r.finished_at < cutoff
                ]
            if chosen and not yes:
                _confirm_purge(store, len(chosen))
            purged = opened.purge(chosen)
        except KeyError as exc:  # its message as written, not str(): a repr, quoted
            _fail(f"{exc.args[0]}; nothing was purged")
        except ValueError as exc:
            _fail(str(exc))
    click.echo(f"purged {purged} finished operation(s)")


def can_ask() -> bool:
    """A person who can answer a question: a terminal on stdin. Whatever stdout is (a
    pipe to `tee`, a file), the question goes to stderr, on their terminal."""
    return sys.stdin.isatty()


def _confirm_purge(store: Path | str, count: int) -> None:
    """Ask a person at a terminal; tell a script that it should say --yes."""
    if not can_ask():
        click.echo(
            "warning: purging without --yes outside a terminal is deprecated; a later"
            " version will refuse: add --yes to this command",
            err=True,
        )
        return
    if not click.confirm(
        f"Delete {count} finished operation(s) from {store}? The store then no longer"
        " knows them (a batch rerun looks them up on the server)",
        default=False,
        err=True,
    ):
        _fail("nothing purged", 1)
