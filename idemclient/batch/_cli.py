"""`idemclient batch submit`: a payout file, submitted safely, as often as needed."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, NoReturn

import click
import httpx

from .._cli_store import STORE_HELP, StoreLocation
from .._client import Client
from .._errors import BatchInvalid, StoreError
from .._policy import RetryPolicy
from ._report import ExitCode
from ._rows import read_batch
from ._run import BatchProgress, submit

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


@batch.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--url", required=True, envvar="IDEMCLIENT_URL", help="The PSP's base URL.")
@click.option(
    "--token",
    required=True,
    envvar="IDEMCLIENT_TOKEN",
    help="Bearer token (or set IDEMCLIENT_TOKEN; it is never written to the store).",
)
@click.option(
    "--store",
    default="idemclient.db",
    show_default=True,
    type=StoreLocation(),
    help=STORE_HELP,
)
@click.option("--path", "api_path", default="/v1/payouts", show_default=True)
@click.option("--operation", default="payout", show_default=True, help="Part of every key.")
@click.option("--batch-ref", default=None, help="Part of every key. [default: the file name]")
@click.option("--namespace", callback=_namespace, help="UUID namespace of the keys.")
@click.option("--ref-column", default="ref", show_default=True)
@click.option("--amount-column", default="amount", show_default=True)
@click.option("--currency-column", default="currency", show_default=True)
@click.option("--date-column", default="value_date", show_default=True)
@click.option(
    "--amount-format",
    type=click.Choice(["minor", "major"]),
    default="minor",
    show_default=True,
    help="minor: integer minor units (357001); major: decimals (3570.01).",
)
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 256))
@click.option("--deadline", default=60.0, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--max-attempts", default=8, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--timeout",
    "attempt_timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    help="Seconds one attempt may take (also cut to what is left of --deadline).",
)
@click.option("--report", callback=_report_path, help="Write a per-row report (.csv or .json).")
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
    concurrency: int,
    deadline: float,
    max_attempts: int,
    attempt_timeout: float,
    report: str | None,
) -> None:
    """Submit FILE (CSV with a header) row by row.

    Exit codes: 0 every row succeeded; 2 bad input, nothing sent; 3 some rows are not
    sent or indeterminate: run the same command again; 4 some rows were refused.
    """
    try:
        parsed = read_batch(
            file,
            batch_reference=batch_ref,
            reference_column=ref_column,
            amount_column=amount_column,
            currency_column=currency_column,
            date_column=date_column,
            amount_format="major" if amount_format == "major" else "minor",
        )
    except BatchInvalid as exc:
        _fail(str(exc), ExitCode.BAD_INPUT)
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror}", ExitCode.BAD_INPUT)
    policy = RetryPolicy(
        deadline=deadline, max_attempts=max_attempts, attempt_timeout=attempt_timeout
    )
    try:
        client = Client(
            store=store,
            policy=policy,
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
        )
    except (StoreError, ImportError) as exc:
        _fail(str(exc), ExitCode.BAD_INPUT)
    with client:
        _check_reachable(client, url)
        progress = _ProgressView(len(parsed.rows))
        options: dict[str, Any] = {"namespace": namespace} if namespace else {}
        try:
            result = submit(
                parsed,
                client,
                path=api_path,
                operation=operation,
                concurrency=concurrency,
                on_progress=progress.update,
                **options,
            )
        except BatchInvalid as exc:
            _fail(str(exc), ExitCode.BAD_INPUT)
        finally:
            progress.close()
    if any(row.http_status in (401, 407) for row in result.rows):
        click.echo(
            "error: the server refused the credentials (HTTP 401): check --token. Nothing"
            " was applied for the refused rows; run again with the right token.",
            err=True,
        )
    if report:
        result.write(report)
        click.echo(f"report written to {report}", err=True)
    click.echo(result.summary())
    sys.exit(int(result.exit_code))


def _check_reachable(client: Client, url: str) -> None:
    """Fail fast, before a batch starts, when the server cannot be reached at all."""
    try:
        client.get("/", timeout=10).close()
    except httpx.TransportError as exc:
        _fail(
            f"cannot reach {url}: {type(exc).__name__}: {exc}. Nothing was sent; run the"
            " same command again once it is reachable.",
            ExitCode.RUN_AGAIN,
        )


def _fail(message: str, code: ExitCode) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(int(code))


class _ProgressView:
    """A progress bar on a terminal; plain lines (every 10%) anywhere else."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._last: BatchProgress | None = None
        self._tty = sys.stderr.isatty()
        self._bar: Any = None
        self._printed_step = -1
        if self._tty:
            self._bar = click.progressbar(
                length=total,
                file=sys.stderr,
                label="submitting",
                show_pos=True,
                item_show_func=lambda p: None if p is None else _counts(p),
            )
            self._bar.__enter__()

    def update(self, progress: BatchProgress) -> None:
        done_before = self._last.done if self._last else 0
        self._last = progress
        if self._bar is not None:
            self._bar.update(progress.done - done_before, progress)
            return
        step = progress.done * 10 // max(1, self.total)
        if step != self._printed_step and (progress.done != done_before or progress.done == 0):
            self._printed_step = step
            click.echo(f"[{progress.done}/{progress.total}] {_counts(progress)}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _counts(p: BatchProgress) -> str:
    return (
        f"succeeded {p.succeeded}  replayed {p.replayed}  retrying {p.retrying}"
        f"  indeterminate {p.indeterminate}  not sent {p.not_sent}  failed {p.failed}"
    )
