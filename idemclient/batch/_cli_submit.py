"""What `idemclient batch submit` does once its options are read (`_cli`): the file
read and checked, the store and the client opened, the server reached, then a dry
run's preview or the run itself, in a thread of its own so that Ctrl-C and SIGTERM
stop it cleanly (no new row, no new retry) and the summary and the report still
come out; the command exits with the report's code."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, overload

import click
import httpx

from .. import Client, State, _cli_errors
from .._cli_options import retry_line
from .._cli_store import describe_missing
from .._errors import BatchInvalid, StoreError
from .._seam import open_store, redact_url, shown_url
from ..clock import SystemClock
from ..hooks import AttemptEvent, Hooks
from ..policy import RetryBudget, RetryPolicy
from ..profiles import Profile
from ._identity import scoped
from ._preview import Preview, preview
from ._progress import ProgressView
from ._reachable import unreachable
from ._report import ExitCode, Report, ReportRow, check_report_path
from ._resave import Held
from ._rows import Batch, PayoutRow
from ._run import make_run, run_sync
from ._signals import Told, held, signal_of, stopping_on_signals, told_by_signals, wait_until
from ._staged import stage_batch

__all__ = ["fail", "submit_file"]

#: After Ctrl-C, how long the rows in flight get to finish their attempt.
_GRACE = 5.0


def submit_file(
    *,
    file: Path,
    url: str,
    token: str,
    store: Path | str,
    api_path: str,
    operation: str,
    batch_ref: str | None,
    namespace: uuid.UUID,
    read_options: dict[str, Any],
    concurrency: int,
    policy: RetryPolicy,
    profile: Profile,
    retry_budget: int,
    lookup: str | None,
    statuses: dict[str, State] | None,
    reliable_404: bool,
    reference_field: str,
    new_payments: bool | tuple[str, ...],
    report: str | None,
    dry_run: bool = False,
    server_clock: bool = True,
    profile_by_host: bool = True,
    as_json: bool = False,
    verbose: bool = False,
) -> NoReturn:
    if report is not None:
        keep = (file, *((store,) if isinstance(store, Path) else ()))
        try:
            check_report_path(report, not_these=keep)
        except ValueError as exc:
            fail(f"{exc}; nothing was sent", ExitCode.BAD_INPUT)
    try:
        # Kept on disk, read back a chunk at a time: a million rows are never held.
        parsed = stage_batch(file, batch_reference=batch_ref, **read_options)
    except BatchInvalid as exc:
        fail(str(exc), ExitCode.BAD_INPUT)
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", ExitCode.BAD_INPUT)
    options: dict[str, Any] = {
        "path": api_path,
        "operation": operation,
        "namespace": namespace,
        "concurrency": concurrency,
        "lookup": lookup,
        "statuses": statuses,
        "reliable_404": reliable_404,
        "reference_field": reference_field,
        "new_payments": new_payments,
    }
    if dry_run:
        _dry_run(
            parsed,
            url=url,
            token=token,
            store=store,
            policy=policy,
            profile=profile,
            options=options,
            show=functools.partial(_show_preview, as_json=as_json, verbose=verbose),
        )
        sys.exit(int(ExitCode.OK))
    with stopping_on_signals():
        _submit_run(
            parsed,
            url=url,
            token=token,
            store=store,
            policy=policy,
            profile=profile,
            retry_budget=retry_budget,
            server_clock=server_clock,
            profile_by_host=profile_by_host,
            verbose=verbose,
            options=options,
            report=report,
            as_json=as_json,
        )


def _submit_run(
    parsed: Batch,
    *,
    url: str,
    token: str,
    store: Path | str,
    policy: RetryPolicy,
    profile: Profile,
    retry_budget: int,
    server_clock: bool,
    profile_by_host: bool,
    verbose: bool,
    options: dict[str, Any],
    report: str | None,
    as_json: bool,
) -> NoReturn:
    """The run of a batch read and checked: started, watched, reported."""
    progress = ProgressView(len(parsed.rows))
    try:
        client, run = _start(
            parsed,
            url=url,
            token=token,
            store=store,
            policy=policy,
            profile=profile,
            retry_budget=retry_budget,
            server_clock=server_clock,
            profile_by_host=profile_by_host,
            verbose=verbose,
            progress=progress,
            options=options,
        )
    except KeyboardInterrupt as interrupt:
        # The start-up check may wait on the server for seconds: what was asked is told.
        with held():
            progress.close()
            stopped = dataclasses.replace(_not_started(parsed, url), signal=signal_of(interrupt))
            _finish(stopped, report, as_json=as_json)
    # From here on a signal is noted, never raised: what the run came to is written whole.
    with told_by_signals() as told:
        with client:
            result = _run_interruptibly(run, client.http, progress, told)
            # Each row, with why it was refused: as the store has it, so while it is open.
            refused = run.report(refused=result) if isinstance(result, BatchInvalid) else None
        progress.close()
        if isinstance(result, BaseException):
            if isinstance(result, BatchInvalid):
                assert refused is not None
                if report:  # each row, with why it was refused
                    _write(refused, report)
                if as_json:  # the same document as any run's: `refused` true, its exit code
                    document = refused.batch_document()
                    click.echo(json.dumps(document, indent=2, ensure_ascii=False))
                fail(str(result), refused.exit_code)
            if isinstance(result, StoreError):
                fail(f"{result}; run the same command again once it is usable", ExitCode.RUN_AGAIN)
            raise result
        _finish(result, report, as_json=as_json)


def _start(
    parsed: Batch,
    *,
    url: str,
    token: str,
    store: Path | str,
    policy: RetryPolicy,
    profile: Profile,
    retry_budget: int,
    server_clock: bool,
    profile_by_host: bool,
    verbose: bool,
    progress: ProgressView,
    options: dict[str, Any],
) -> tuple[Client, Any]:
    """The client and the run, once the server is known to answer (nothing is sent)."""
    try:
        client = Client(
            store=store,
            policy=policy,
            profile=profile,
            budget=RetryBudget(retry_budget),
            base_url=url,
            headers={"Authorization": f"Bearer {token}"},
            hooks=Hooks(
                on_retry=lambda event: progress.say(retry_line(event)),
                on_attempt=lambda event: progress.say(_attempt_line(event)),
            )
            if verbose
            else None,
            server_clock=server_clock,
            time_probe=server_clock,
            profile_by_host=profile_by_host,
        )
    except (StoreError, ImportError) as exc:
        fail(str(exc), ExitCode.BAD_INPUT)
    try:
        _check_reachable(client, url)
        try:
            run = make_run(
                parsed,
                client,
                on_progress=progress.update,
                notify=progress.say,
                # Without a user, password or secret query value given in it.
                metadata={"url": str(redact_url(httpx.URL(url)))},
                **options,
            )
        except ValueError as exc:
            fail(str(exc), ExitCode.BAD_INPUT)
        if verbose:
            run.on_lookup_retry = progress.say
    except BaseException:
        client.close()
        raise
    return client, run


def _not_started(parsed: Batch, url: str) -> Report:
    """The report of a run interrupted before it started: every row not sent."""
    return Report(
        batch=parsed.scope or Path(parsed.source).name,
        rows=_NotStarted(parsed),
        metadata={
            "source": parsed.source,
            "batch_reference": parsed.scope,
            "url": str(redact_url(httpx.URL(url))),
        },
        interrupted=True,
    )


class _NotStarted(Sequence[ReportRow]):
    """Every row of a batch not sent, made as it is read: a million rows' lines are
    never all held."""

    _WHY = "not sent: interrupted before anything was sent; run again"

    def __init__(self, parsed: Batch) -> None:
        self._parsed = parsed

    def __len__(self) -> int:
        return len(self._parsed.rows)

    def __iter__(self) -> Iterator[ReportRow]:
        return map(self._line, self._parsed.rows)

    @overload
    def __getitem__(self, index: int) -> ReportRow: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ReportRow]: ...

    def __getitem__(self, index: int | slice) -> ReportRow | Sequence[ReportRow]:
        if isinstance(index, slice):
            return [self._line(row) for row in self._parsed.rows[index]]
        return self._line(self._parsed.rows[index])

    def _line(self, row: PayoutRow) -> ReportRow:
        reference = scoped(self._parsed.scope, row.reference)
        return ReportRow(row.number, reference, "", "not_sent", None, None, 0, False, self._WHY)


def _finish(result: Report, report: str | None, *, as_json: bool) -> NoReturn:
    """Write the report (first: it is what stays), say the summary, exit. Said on a
    terminal that may be gone (SIGHUP): the report is written whatever happens to it."""
    if report:
        _write(result, report)
    with _terminal_may_be_gone():
        if result.interrupted:
            click.echo("interrupted: no new row was started", err=True)
        if as_json:
            click.echo(json.dumps(result.batch_document(), indent=2, ensure_ascii=False))
        else:
            click.echo(_coloured(result.summary(), result.exit_code))
    sys.exit(int(result.exit_code))


@contextlib.contextmanager
def _terminal_may_be_gone() -> Iterator[None]:
    """Writes to stdout and stderr that fail (the terminal went away with an SSH
    session, a reader closed the pipe) are dropped, and so is what is left to write
    there: the exit code stays the command's, not a broken pipe's."""
    try:
        yield
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                os.dup2(devnull, stream.fileno())
        os.close(devnull)


def _attempt_line(event: AttemptEvent) -> str:
    """An attempt handed to the transport, for `--verbose` (no URL: it may carry what
    the operator would not have printed)."""
    return f"attempt: {event.operation_id} attempt {event.attempt} (timeout {event.timeout:g}s)"


def _coloured(summary: str, code: ExitCode) -> str:
    colour = {ExitCode.OK: "green", ExitCode.RUN_AGAIN: "yellow"}.get(code, "red")
    return click.style(summary, fg=colour)


def _dry_run(
    parsed: Any,
    *,
    url: str,
    token: str,
    store: Path | str,
    policy: RetryPolicy,
    profile: Profile,
    options: dict[str, Any],
    show: Callable[[Preview], None],
) -> None:
    """`--dry-run`: the plan of every row, from the file and the store alone, shown by
    `show` (a row at a time, while the store is open). A store that does not exist yet
    is not created: the plan is made on an empty one."""
    with contextlib.ExitStack() as stack:
        if describe_missing(store) is not None:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            store = scratch / "empty.db"
        try:
            opened = stack.enter_context(contextlib.closing(open_store(store)))
        except (StoreError, ImportError) as exc:
            fail(str(exc), ExitCode.BAD_INPUT)
        # Only builds the requests a run would send (base URL, credentials): sends none.
        http = stack.enter_context(
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        )
        try:
            shown = preview(
                parsed,
                store=opened,
                clock=SystemClock(),
                policy=policy,
                http=http,
                profile=profile,
                **options,
            )
            show(shown)
        except BatchInvalid as exc:
            code = ExitCode.HELD if isinstance(exc, Held) else ExitCode.BAD_INPUT
            fail(f"{exc}\n(dry run: nothing was looked up, recorded or sent)", code)
        except (ValueError, StoreError) as exc:
            fail(str(exc), ExitCode.BAD_INPUT)


_STEP_COLOURS = {"new": "cyan", "known": "yellow", "done": "green", "reopen": "yellow"}


def _show_preview(shown: Preview, *, as_json: bool, verbose: bool) -> None:
    if as_json:  # the bodies only with -v, as in text; a row at a time
        shown.write_json(sys.stdout, bodies=verbose)
        return
    for row in shown.rows:
        step = click.style(f"{row.step:<9}", fg=_STEP_COLOURS.get(row.step, "magenta"))
        known = (
            f"store: {row.stored_state}, {row.stored_attempts} attempt(s)"
            if row.stored_state
            else "store: unknown"
        )
        sent = f"{row.method} {row.url}" if row.method else "nothing sent"
        lookup = "; would be looked up first" if row.look_up else ""
        click.echo(f"row {row.row} {row.reference}  {step} {known}; {sent}{lookup}")
        if verbose:
            click.echo(f"    {row.action}; key {row.key}")
            if row.body is not None:
                click.echo(f"    body: {row.body}")
    click.echo(shown.summary())


def _run_interruptibly(
    run: Any, http: httpx.Client, progress: ProgressView, told: Told
) -> Report | BaseException:
    """The run's report (or its error), from a thread of its own. A first Ctrl-C (or
    SIGTERM, SIGHUP) stops it: no new row, and the rows in flight get `_GRACE` seconds
    to finish their attempt. A second one, or the grace's end, stops waiting: the rows
    still in flight are written in the store as they stand (`RunState.abandon`: an attempt
    handed to the transport counts, maybe applied), and the report shows every row as
    the store has it. Signals are noted (`told`), never raised here."""
    outcome: list[Report | BaseException] = []
    finished = threading.Event()

    def work() -> None:
        try:
            outcome.append(run_sync(run, http))
        except BaseException as exc:  # handed to the main thread, not lost
            outcome.append(exc)
        finally:
            finished.set()

    threading.Thread(target=work, name="idemclient-batch-run", daemon=True).start()
    wait_until(lambda: finished.is_set() or bool(told.signals))
    signum: int | None = told.signals[0] if told.signals else None
    if signum is not None:
        run.stop()
        progress.say(
            f"interrupting ({signal.Signals(signum).name}): no new row is started; rows in"
            f" flight finish their attempt, for {_GRACE:g}s at most (Ctrl-C again to stop"
            " waiting for them)"
        )
        deadline = time.monotonic() + _GRACE
        # Until the run ends, a second signal, or the grace is over.
        wait_until(lambda: finished.is_set() or len(told.signals) >= 2, deadline - time.monotonic())
    if outcome and (not run.stopping.is_set() or isinstance(outcome[0], Report | BatchInvalid)):
        result = outcome[0]
    else:
        if not finished.is_set():
            cut = run.abandon()
            if cut:
                progress.say(
                    f"stopped: {cut} row(s) were in flight; each is recorded as sent,"
                    " maybe applied: the same command run again settles them"
                )
        result = run.report(interrupted=True)
    if signum is not None and isinstance(result, Report) and result.interrupted:
        result = dataclasses.replace(result, signal=signum)
    return result


def _write(result: Report, path: str) -> None:
    try:
        result.write(path)
    except OSError as exc:
        with _terminal_may_be_gone():
            click.echo(f"error: the report was not written to {path}: {exc.strerror}", err=True)
        return
    with _terminal_may_be_gone():
        click.echo(f"report written to {path}", err=True)


def _check_reachable(client: Client, url: str) -> None:
    """Fail fast, before a batch starts, when the server cannot be reached at all."""
    try:
        client.get("/", timeout=10).close()
    except httpx.TransportError as exc:
        fail(*unreachable(exc, shown_url(url)))  # no credential of the URL echoed


def fail(message: str, code: ExitCode) -> NoReturn:
    _cli_errors.fail(message, int(code))
