"""What the commands share beside `--store` (`_cli_store`): the options `ops` and
`batch submit` both take (`--json`, `--verbose`, `--server-clock`,
`--profile-by-host`, `--status`, `--reliable-404`), and how a state and a retry are
shown to the operator."""

from __future__ import annotations

import sys

import click

from . import State
from ._seam import reconcile
from .hooks import RetryEvent

__all__ = [
    "JSON_OPTION",
    "PROFILE_BY_HOST_OPTION",
    "RELIABLE_404_HELP",
    "SERVER_CLOCK_OPTION",
    "STATUS_HELP",
    "VERBOSE_OPTION",
    "interactive",
    "parse_statuses",
    "retry_line",
    "styled_state",
]


JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Write JSON to stdout instead of lines for people."
)


VERBOSE_OPTION = click.option(
    "-v", "--verbose", is_flag=True, help="Show each retry as it happens (on stderr)."
)


SERVER_CLOCK_OPTION = click.option(
    "--server-clock/--no-server-clock",
    default=True,
    help="Judge a maybe-applied operation's age and in-flight hold by the server's Date"
    " header as well as this host's clock (default: the command asks the server's time"
    " with one HEAD request to the URL's origin before its first operation);"
    " --no-server-clock for a server whose Date is known to be wrong (and no HEAD).",
)


PROFILE_BY_HOST_OPTION = click.option(
    "--profile-by-host/--no-profile-by-host",
    default=True,
    help="A known provider's API host (PayPal, Stripe, Adyen...) speaks its provider's"
    " profile when none is chosen, and refuses another chosen one, before anything is"
    " sent (default); --no-profile-by-host for a host that really speaks the other"
    " dialect (a proxy, a test double).",
)


#: The colour of each state on a terminal (none in a pipe, or with NO_COLOR set).
_COLOURS = {
    State.SUCCEEDED: "green",
    State.FAILED: "red",
    State.INDETERMINATE: "yellow",
    State.NOT_SENT: "magenta",
    State.PENDING: "cyan",
    State.IN_FLIGHT: "cyan",
}


def styled_state(state: State, width: int = 0) -> str:
    """`state`, padded to `width`, in its colour (click drops colour where there is no
    terminal, and where the command's context says none: NO_COLOR)."""
    return click.style(f"{state.value:<{width}}", fg=_COLOURS.get(state))


def retry_line(event: RetryEvent) -> str:
    """A retry, for `--verbose` (plain text: a progress view writes it as it is)."""
    return (
        f"retry: {event.operation_id} after attempt {event.attempt}: {event.evidence};"
        f" next attempt in {event.wait:.2f}s"
    )


def interactive() -> bool:
    """A person at a terminal, who can answer a question."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def parse_statuses(
    _ctx: click.Context | None, _param: click.Parameter | None, values: tuple[str, ...]
) -> dict[str, State] | None:
    """`--status NAME=succeeded|failed` options as a mapping added to the defaults."""
    if not values:
        return None
    statuses = dict(reconcile.DEFAULT_STATUSES)
    for value in values:
        name, sep, state = value.partition("=")
        if not sep or not name.strip() or state.strip() not in ("succeeded", "failed"):
            raise click.BadParameter(
                f"{value!r}: write NAME=succeeded or NAME=failed (e.g. paid=succeeded)"
            )
        statuses[name.strip().lower()] = State(state.strip())
    return statuses


STATUS_HELP = (
    "A payment status the look-up may show, and what it means: NAME=succeeded or"
    " NAME=failed (repeatable; added to succeeded, completed -> succeeded and failed,"
    " declined -> failed). Any other status is not final: the operation stays unsettled."
)


RELIABLE_404_HELP = (
    "A 404 from the look-up means 'no such payment' (only for an API that answers so:"
    " otherwise a wrong URL or path would look like a payment never made)."
)
