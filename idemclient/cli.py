"""The `idemclient` command: one click group; each area brings its own commands.

The reference server's command is loaded only when it is asked for (`idemclient
server`, or a listing such as `idemclient --help`): the reference server is a test
tool, and `idemclient batch` or `idemclient ops` never import it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, ClassVar

import click

from . import __version__, _cli_errors
from ._ops_cli import ops
from .batch._cli import batch


class _Commands(click.Group):
    """A click group that imports some of its commands on first use."""

    #: command name -> (module, attribute) of the command, imported when needed
    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "server": ("idemclient.testing._adapters.cli", "server"),
    }

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command; its errors, and click's own, read ``error: ...`` (see
        `_cli_errors`), whichever command raised them."""
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            result = super().main(*args, **kwargs)
        except click.ClickException as exc:
            _cli_errors.show(exc)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        # Without standalone mode click returns the code of a `ctx.exit()` (--help,
        # --version) or the command's own return value.
        sys.exit(result if isinstance(result, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attribute = self.lazy[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="idemclient")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Safe retries for unsafe HTTP requests.

    Colour on a terminal only; none in a pipe or a file, nor with NO_COLOR set.
    """
    if os.environ.get("NO_COLOR"):
        ctx.color = False  # the NO_COLOR convention: any non-empty value


main.add_command(batch)
main.add_command(ops)
