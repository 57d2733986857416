"""The reference server is loaded only where it is used: never by `import idemclient`,
never by the commands that are not `idemclient server`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from idemclient.cli import main

LOADED = "print(sorted(m for m in sys.modules if m.startswith('idemclient.testing')))"


def loaded_after(statement: str) -> str:
    """The idemclient.testing modules a fresh interpreter holds after `statement`."""
    done = subprocess.run(
        [sys.executable, "-c", f"import sys\n{statement}\n{LOADED}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()[-1]  # after whatever the command printed


def test_importing_the_package_does_not_load_the_reference_server() -> None:
    assert loaded_after("import idemclient") == "[]"


@pytest.mark.parametrize("argv", [["batch", "--help"], ["ops", "--help"], ["--version"]])
def test_other_commands_do_not_load_the_reference_server(argv: list[str]) -> None:
    statement = (
        "from idemclient.cli import main\n"
        f"try:\n    main({argv!r}, prog_name='idemclient')\n"
        "except SystemExit as exit:\n    assert exit.code == 0, exit.code"
    )
    assert loaded_after(statement) == "[]"


def test_the_server_command_loads_it_when_asked_for() -> None:
    statement = (
        "from idemclient.cli import main\n"
        "try:\n    main(['server', '--help'], prog_name='idemclient')\n"
        "except SystemExit as exit:\n    assert exit.code == 0, exit.code"
    )
    assert "idemclient.testing._adapters.cli" in loaded_after(statement)


def test_the_server_command_is_listed_beside_the_others() -> None:
    ctx = main.make_context("idemclient", ["--help"], resilient_parsing=True)
    assert {"batch", "ops", "server"} <= set(main.list_commands(ctx))
