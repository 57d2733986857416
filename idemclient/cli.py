"""The `idemclient` command: one click group; each area brings its own commands.

The reference server's command is loaded only when it is asked for (`idemclient
server`, or a listing such as `idemclient --help`): the reference server is a test
tool, and `idemclient batch` or `idemclient ops` never import it.
"""

from __future__ import annotations

import importlib
import os
from typing import ClassVar

import click

from ._ops_cli import ops
from ._version import __version__
from .batch._cli import batch


class _Commands(click.Group):
    """A click group that imports some of its commands on first use."""

    #: command name -> (module, attribute) of the command, imported when needed
    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "server": ("idemclient.testing._adapters.cli", "server"),
    }

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
