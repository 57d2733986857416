"""The clients' options are typed: mypy --strict sees a misspelt option, a wrong type
and what each method returns (`client_options.py`), and names the option and the method
in its error. (pyright reads the same signatures; it is not part of the test run.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import idemclient

ROOT = Path(idemclient.__file__).parents[1]
CHECKED = Path(__file__).with_name("client_options.py")


def mypy(*targets: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict on `targets`, reading the idemclient these tests import."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *map(str, targets)],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_misspelt_option_in_the_checked_file_is_an_error() -> None:
    # Each misspelling there is ignored by its error code: if mypy stopped seeing one,
    # the ignore would be unused, and --strict (warn_unused_ignores) fails on it.
    checked = mypy(CHECKED)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_misspelt_option_is_named_with_its_method(tmp_path: Path) -> None:
    snippet = tmp_path / "typo.py"
    snippet.write_text(
        "from idemclient import AsyncClient, Client\n"
        "\n"
        "\n"
        "def pay(client: Client) -> None:\n"
        '    client.post("/v1/payments", json={}, operaton_id="order-1")\n'
        '    client.put("/v1/payments/1", refrence="inv-1")\n'
        "\n"
        "\n"
        "async def apay(client: AsyncClient) -> None:\n"
        '    await client.patch("/v1/payments/1", jsn={})\n'
        '    await client.delete("/v1/payments/1", identiy="inv-1")\n'
    )
    checked = mypy(snippet)
    errors = [
        line.split(": error: ", 1)[1] for line in checked.stdout.splitlines() if ": error: " in line
    ]
    expected = [
        ("operaton_id", "post", "Client", "operation_id"),
        ("refrence", "put", "Client", "reference"),
        ("jsn", "patch", "AsyncClient", "json"),
        ("identiy", "delete", "AsyncClient", "identity"),
    ]
    assert errors == [
        f'Unexpected keyword argument "{wrong}" for "{verb}" of "{cls}";'
        f' did you mean "{right}"?  [call-arg]'
        for wrong, verb, cls, right in expected
    ], checked.stdout + checked.stderr
