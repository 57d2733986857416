"""The `idemclient` command: one click group; each area registers its own commands."""

from __future__ import annotations

import click

from . import __version__
from .testing._cli import server as _server_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="idemclient")
def main() -> None:
    """Safe retries for unsafe HTTP requests."""


main.add_command(_server_command)
