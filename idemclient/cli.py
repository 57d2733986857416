"""The `idemclient` command: one click group; each area brings its own commands."""

from __future__ import annotations

import click

from . import __version__
from ._ops_cli import ops
from .batch._cli import batch
from .testing._cli import server


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="idemclient")
def main() -> None:
    """Safe retries for unsafe HTTP requests."""


main.add_command(batch)
main.add_command(ops)
main.add_command(server)
