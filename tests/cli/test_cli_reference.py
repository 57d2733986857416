"""docs/reference/cli.md names every command and every option the CLI has."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from idemclient.cli import main

REFERENCE = (Path(__file__).parents[2] / "docs" / "reference" / "cli.md").read_text()


def commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    # list_commands/get_command, not `.commands`: they include the commands the group
    # loads only on demand (`server`).
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found += commands(command, f"{path} ")
        else:
            found.append((path, command))
    return found


@pytest.mark.parametrize(("path", "command"), commands(main), ids=lambda v: str(v))
def test_every_command_and_option_is_documented(path: str, command: click.Command) -> None:
    assert f"idemclient {path.split()[0]}" in REFERENCE or f"`{path}" in REFERENCE, path
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts:
                if flag.startswith("--") and flag != "--help":
                    assert flag in REFERENCE, f"{path}: {flag} is not documented"
