"""How every `idemclient` command reports an error: one line on stderr, ``error: ...``,
then its exit code. click's own errors (a bad option value, a missing argument) are
shown the same way, after the usage line and the hint click gives."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

__all__ = ["fail", "show"]


def fail(message: str, code: int = 2) -> NoReturn:
    """Report `message` as the command's error and exit with `code`."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def show(exc: click.ClickException) -> None:
    """What click would show for `exc`, in the commands' one style."""
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        help_option = next(iter(exc.ctx.help_option_names), "--help")
        click.echo(exc.ctx.get_usage(), err=True, color=exc.ctx.color)
        click.echo(f"Try '{exc.ctx.command_path} {help_option}' for help.\n", err=True)
    click.echo(f"error: {exc.format_message()}", err=True)
