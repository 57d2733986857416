"""`idemclient batch submit`: a payout file, submitted safely, as often as needed.

Everything the operator can get wrong is refused before anything is sent, with exit
code 2 and what to do: the file, an option, an empty token, a URL without a scheme, a
report that cannot be written, a look-up that does not work, a known reference with
other content, a row paid elsewhere, the same payment under another reference. A
batch refused once its rows are read still writes its report, each row with why. The
run itself happens in a thread of its own, so that Ctrl-C stops it
cleanly (no new row, no new retry), and the summary and the report still come out
(exit code 130).
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import click
import httpx

from .. import State
from .._cli_duration import duration
from .._cli_options import (
    JSON_OPTION,
    PROFILE_BY_HOST_OPTION,
    RELIABLE_404_HELP,
    SERVER_CLOCK_OPTION,
    STATUS_HELP,
    parse_statuses,
)
from .._cli_store import STORE_HELP, StoreLocation
from .._seam import normal_host, provider_at
from ..keys import DEFAULT_NAMESPACE
from ..policy import RetryPolicy
from ..profiles import BUILTIN, DEFAULT, Profile
from ._cli_submit import fail, submit_file
from ._lookup import DEFAULT_LOOKUP
from ._report import ExitCode

__all__ = ["batch"]


@click.group()
def batch() -> None:
    """Submit payout files: every row is paid once, however often the file is run."""


def _report_path(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and Path(value).suffix.lower() not in (".csv", ".json"):
        raise click.BadParameter("the report must be a .csv or .json file")
    return value


def _namespace(_ctx: click.Context, _param: click.Parameter, value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a UUID") from exc


def _base_url(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise click.BadParameter(f"{value!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise click.BadParameter(
            f"{value!r} has no scheme or host: write it whole, e.g. https://psp.example"
        )
    return value


def _token(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not value.strip():
        raise click.BadParameter(
            "the token is empty: is IDEMCLIENT_TOKEN (or the variable given to --token) set?"
        )
    if not value.isascii() or any(c.isspace() or not c.isprintable() for c in value):
        raise click.BadParameter("the token has spaces or characters an HTTP header cannot carry")
    return value


def _delimiter(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "semicolon": ";", "comma": ","}
    value = named.get(value.lower(), value)
    if len(value) != 1 or value in '\r\n"' or value.isalnum():
        raise click.BadParameter(f"{value!r}: give one character, such as ';' or 'tab'")
    return value


def _profile(
    name: str | None,
    retention: float | None,
    in_flight_for: float | None,
    *,
    url: str,
    by_host: bool,
) -> Profile:
    """The named profile (none named: the provider's, where `url` is a known provider's
    API host, else the default), with what the operator knows better than it. A named
    one that contradicts the host's provider is refused, unless `by_host` is off."""
    host = httpx.URL(url).host
    known = provider_at(host) if by_host else None
    if name is None:
        chosen = known or DEFAULT
        if known is not None:
            click.echo(
                f"server profile: {known.name} ({host} is an API host of its provider;"
                " --profile chooses one)",
                err=True,
            )
    else:
        chosen = BUILTIN[name]
        if known is not None and not chosen.answers_at(normal_host(host)):
            fail(
                f"--profile {name}: {host} is an API host of the {known.name} profile's"
                f" provider, whose server reads its key from the {known.key.where} (the"
                f" {name} profile puts it in the {chosen.key.where}) and means its own"
                f" answers. Nothing was sent. Use --profile {known.name}, or leave"
                " --profile out; if this host really speaks that dialect (a proxy, a test"
                " double), add --no-profile-by-host",
                ExitCode.BAD_INPUT,
            )
    profile = chosen if retention is None else chosen.with_retention(retention)
    if in_flight_for is not None:
        profile = dataclasses.replace(profile, in_flight_for=in_flight_for)
    return profile


@batch.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--url",
    required=True,
    envvar="IDEMCLIENT_URL",
    show_envvar=True,
    callback=_base_url,
    help="The PSP's base URL, scheme included: https://psp.example.",
)
@click.option(
    "--token",
    required=True,
    envvar="IDEMCLIENT_TOKEN",
    show_envvar=True,
    callback=_token,
    help="Bearer token. Prefer the environment variable (it stays out of shell"
    " history). Never written to the store.",
)
@click.option(
    "--store",
    default="idemclient.db",
    show_default=True,
    type=StoreLocation(),
    help=STORE_HELP,
)
@click.option(
    "--path",
    "api_path",
    default="/v1/payouts",
    show_default=True,
    help="Where each row is POSTed, under --url.",
)
@click.option(
    "--operation",
    default="payout",
    show_default=True,
    help="What each row is; part of every row's identity and key.",
)
@click.option(
    "--batch-ref",
    default=None,
    help="A scope for references that repeat across files (an employee id every"
    " month): a row is then its reference within the scope, and the server sees"
    " <batch-ref>/<reference>. [default: none: every reference stands on its own; the"
    " file's name never counts]",
)
@click.option(
    "--namespace",
    callback=_namespace,
    help=f"UUID namespace of new rows' keys. [default: {DEFAULT_NAMESPACE}]",
)
@click.option(
    "--ref-column",
    default="ref",
    show_default=True,
    help="The column of each row's reference (unique in the file).",
)
@click.option(
    "--amount-column", default="amount", show_default=True, help="The column of the amount."
)
@click.option(
    "--currency-column",
    default="currency",
    show_default=True,
    help="The column of the ISO 4217 currency code.",
)
@click.option(
    "--date-column",
    default="value_date",
    show_default=True,
    help="The column of the value date (YYYY-MM-DD).",
)
@click.option(
    "--amount-format",
    type=click.Choice(["minor", "major"]),
    default="minor",
    show_default=True,
    help="minor: integer minor units (357001); major: decimals (3570.01).",
)
@click.option(
    "--delimiter",
    default=",",
    show_default=True,
    callback=_delimiter,
    help="The character between columns: ';' (spreadsheets set to European"
    " conventions save so), or 'tab'.",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Rows sent (and looked up) at once.",
)
@click.option(
    "--deadline",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds one row may take, over every attempt and wait.",
)
@click.option(
    "--max-attempts",
    default=8,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Attempts per row, the first one included.",
)
@click.option(
    "--timeout",
    "attempt_timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Seconds one attempt may take (also cut to what is left of --deadline).",
)
@click.option(
    "--retry-budget",
    default=500,
    show_default=True,
    type=click.IntRange(0, 10**9),
    help="Retry tokens the rows of a run share: a retry takes 5 (10 after a timeout or"
    " a lost answer), a success gives 1 back. Once they run out, rows stop retrying at"
    " once, so a server failing for everyone is not hammered; the run says so, and the"
    " same command later finishes them.",
)
@click.option(
    "--lookup",
    default=DEFAULT_LOOKUP,
    show_default=True,
    help="How a row is looked up on the server before its first send (a row the store"
    " does not know, or knows from longer ago than --key-retention): a URL under --url"
    " with {reference} ({path} is --path). A payment found is recorded and not sent; an"
    " empty list is 'not found'; a 404 or a refusal stops the run before anything is"
    " sent (exit 2), and so does a server that answers 'later' (429, 503) or not at all,"
    " to be run again later (exit 3).",
)
@click.option(
    "--no-lookup",
    is_flag=True,
    help="Send without looking rows up first, for a server that offers no look-up. It"
    " pays twice a row the server paid already but this store does not know (a run"
    " from another machine, or before the store was deleted or purged) once the server"
    " no longer knows its key (past the server's key retention, or a key made by an"
    " earlier version).",
)
@click.option(
    "--profile",
    "profile_name",
    type=click.Choice(list(BUILTIN)),
    default=None,
    help="The server's idempotency dialect: where it reads the key, what its answers"
    " mean, how long it keeps keys (see docs/profiles.md). Default: the provider's, where"
    " --url is a known provider's API host (PayPal, Stripe, Adyen...), else generic. A"
    " store's rows are never sent on under another profile than the one they were first"
    " sent under.",
)
@PROFILE_BY_HOST_OPTION
@click.option(
    "--key-retention",
    default=None,
    callback=duration,
    help="How long the server keeps idempotency keys, if you know better than the"
    " profile (Stripe 24h, Mollie 1h, PayPal orders 6h; default: the profile's): a row"
    " recorded longer ago is looked up before it is sent again. 30m, 6h, 7d, or seconds.",
)
@click.option(
    "--in-flight-for",
    default=None,
    callback=duration,
    help="How long the server may still be running a request after it was sent (its own"
    " request timeout, a crash and its recovery), if you know better than the profile"
    " (default: the profile's, 15m). Until then a look-up that finds nothing does not"
    " make a row that may have been applied 'never applied', and under a profile whose"
    " server runs a second request beside the first, the row is not sent again."
    " 30s, 5m, or seconds.",
)
@click.option(
    "--follow-server-hints",
    is_flag=True,
    help="Obey Stripe-Should-Retry and x-should-retry from any server (a profile whose"
    " server sends one obeys it anyway).",
)
@click.option(
    "--lookup-status",
    "statuses",
    multiple=True,
    callback=parse_statuses,
    help=STATUS_HELP.replace("the operation stays", "the row stays"),
)
@click.option(
    "--lookup-reference-field",
    "reference_field",
    default="reference",
    show_default=True,
    help="The field of a payment, in the look-up's answer, that holds the reference a"
    " row was sent with (some PSPs call it external_reference). A payment counts as the"
    " row only if it shows the row's reference there (or its key, in idempotency_key);"
    " a look-up naming payments that show neither does not work.",
)
@click.option("--reliable-404", is_flag=True, help=RELIABLE_404_HELP)
@click.option(
    "--server-replays",
    is_flag=True,
    help="The server answers a key it has finished with that key's stored answer,"
    " refusals included (Stripe, the reference server). A refusal after an attempt that"
    " may have been applied (a timeout, then a 4xx) then ends the row failed; without"
    " it, such a row stays indeterminate (the server may be refusing a duplicate of a"
    " payout it made) unless the refusal is marked Idempotent-Replayed.",
)
@click.option(
    "--new-payments",
    is_flag=True,
    help="Every row is a new payment, even where the store holds the same payment under"
    " another reference: the very same content (every column) under another --batch-ref"
    " (or none) or --ref-column, refused otherwise (exit 2); or the same payment (every"
    " column but the reference, read as a person reads it) under another reference, as a"
    " spreadsheet's re-save leaves a file (00123 read as 123), held otherwise (exit 6)."
    " Use it only to pay identical payments a second time.",
)
@click.option(
    "--new-payment",
    "new_payment_refs",
    multiple=True,
    metavar="REF",
    help="The row of this reference (as the file has it) is a new payment, though the"
    " store holds the same payment under another reference (see --new-payments):"
    " repeatable, one row each.",
)
@click.option(
    "--report",
    callback=_report_path,
    help="Write a per-row report (.csv or .json). Checked before anything is sent,"
    " written whole or not at all, and written when interrupted too.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the file and show, row by row, what would be sent and what the store"
    " already knows. Nothing is looked up, recorded or sent; exit 0, or 2 for a batch a"
    " run would refuse.",
)
@SERVER_CLOCK_OPTION
@JSON_OPTION
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="A line on stderr as each attempt of a row is handed to the server, and for each"
    " retry (a look-up's too); with --dry-run, each row's key and body.",
)
def submit_command(
    file: Path,
    url: str,
    token: str,
    store: Path | str,
    api_path: str,
    operation: str,
    batch_ref: str | None,
    namespace: uuid.UUID | None,
    ref_column: str,
    amount_column: str,
    currency_column: str,
    date_column: str,
    amount_format: str,
    delimiter: str,
    concurrency: int,
    deadline: float,
    max_attempts: int,
    attempt_timeout: float,
    retry_budget: int,
    lookup: str,
    no_lookup: bool,
    profile_name: str | None,
    profile_by_host: bool,
    key_retention: float | None,
    in_flight_for: float | None,
    follow_server_hints: bool,
    statuses: dict[str, State] | None,
    reference_field: str,
    reliable_404: bool,
    server_replays: bool,
    new_payments: bool,
    new_payment_refs: tuple[str, ...],
    report: str | None,
    dry_run: bool,
    server_clock: bool,
    as_json: bool,
    verbose: bool,
) -> None:
    """Submit FILE (CSV with a header) row by row; run it again after any failure.

    A row is its reference (within --batch-ref, if given): a reference the store knows
    is never sent with other content, unless nothing of it can have been applied (a
    row refused for its content, or never sent, then corrected in the file). Before a
    row the store does not know is first sent, its reference is looked up on the server.

    Exit codes: 0 every row succeeded; 2 bad input (the file, an option, the token, a
    look-up that does not work): fix it, nothing was sent for the rows concerned; 3
    some rows are not sent or indeterminate: run the same command again; 4 some rows
    were refused by the server; 5 some rows may have been applied and a rerun cannot
    settle them: settle each with the idemclient ops reconcile command its reason
    gives; 6 held: rows whose payment the store holds under another reference (a file
    re-saved by a spreadsheet): run the file as first saved, or say --new-payment REF;
    129, 130, 143 stopped by SIGHUP, Ctrl-C, SIGTERM: run the same command again.
    """
    try:
        submit_file(
            file=file,
            url=url,
            token=token,
            store=store,
            api_path=api_path,
            operation=operation,
            batch_ref=batch_ref,
            namespace=namespace or DEFAULT_NAMESPACE,
            read_options={
                "reference_column": ref_column,
                "amount_column": amount_column,
                "currency_column": currency_column,
                "date_column": date_column,
                "amount_format": "major" if amount_format == "major" else "minor",
                "delimiter": delimiter,
            },
            concurrency=concurrency,
            policy=RetryPolicy(
                deadline=deadline,
                max_attempts=max_attempts,
                attempt_timeout=attempt_timeout,
                server_replays=server_replays,
                follow_server_hints=follow_server_hints,
            ),
            profile=_profile(
                profile_name, key_retention, in_flight_for, url=url, by_host=profile_by_host
            ),
            profile_by_host=profile_by_host,
            retry_budget=retry_budget,
            lookup=None if no_lookup else lookup,
            statuses=statuses,
            reliable_404=reliable_404,
            reference_field=reference_field,
            new_payments=new_payments or new_payment_refs,
            report=report,
            dry_run=dry_run,
            server_clock=server_clock,
            as_json=as_json,
            verbose=verbose,
        )
    except KeyboardInterrupt:
        fail("interrupted before anything was sent", ExitCode.INTERRUPTED)
