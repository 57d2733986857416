"""The sdist and the wheel a release would upload: what they hold, how the package index
will show them, and the wheel installed into a brand-new environment without extras,
running the README's first example as a new user would.

`make test` builds both (`python -m build`, `twine check --strict`) and points
IDEMCLIENT_DIST at them; run alone, this module builds its own (without isolation:
hatchling is a dev dependency). The fresh environment gets its dependencies offline
where it can: from a wheelhouse kept beside the test environment
(IDEMCLIENT_WHEELHOUSE, default `<sys.prefix>/wheelhouse`), filled from the package
index only when something is missing.
"""

from __future__ import annotations

import email
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import idemclient

ROOT = Path(__file__).resolve().parents[2]
NAME = f"idemclient-{idemclient.__version__}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("IDEMCLIENT_DIST")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [found] = dist.glob(f"{NAME}-py3-none-any.whl")
    return found


@pytest.fixture(scope="module")
def sdist(dist: Path) -> Path:
    [found] = dist.glob(f"{NAME}.tar.gz")
    return found


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        return email.message_from_bytes(archive.read(f"{NAME}.dist-info/METADATA"))


def test_the_wheel_ships_the_license_and_the_changelog(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        license_text = archive.read(f"{NAME}.dist-info/licenses/LICENSE").decode()
        changelog = archive.read(f"{NAME}.dist-info/extra_metadata/CHANGELOG.md").decode()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text
    assert "Version 2.0, January 2004" in license_text
    assert changelog == (ROOT / "docs" / "changelog.md").read_text()
    assert "idemclient/py.typed" in names
    assert not [name for name in names if name.startswith("tests/")]
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["Version"] == idemclient.__version__


def test_the_description_reads_right_on_a_package_index(wheel: Path) -> None:
    """The long description is the README: a relative link in it points nowhere on the
    package index, so every link is absolute (or names a file of the sdist as text)."""
    description = _metadata(wheel).get_payload()
    assert isinstance(description, str)
    assert description.strip() == (ROOT / "README.md").read_text().strip()
    links = re.findall(r"\]\(([^)]+)\)", description) + re.findall(
        r"<a [^>]*href=\"([^\"]+)\"", description
    )
    assert [link for link in links if not link.startswith(("https://", "http://"))] == []
    assert "pip install idemclient" in description  # the first release's way
    assert "python -m build" in description  # and today's


def test_the_sdist_holds_what_its_tests_and_docs_need(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{NAME}/") for name in archive.getnames()}
    for needed in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "Makefile",
        "mkdocs.yml",
        "docs/changelog.md",
        "docs/index.md",
        "examples/quickstart.py",
        "tests/conftest.py",
        "tests/test_public_api.py",
        "benchmarks/startup.py",
        "idemclient/py.typed",
    ):
        assert needed in names, needed


def test_the_sdist_runs_its_own_tests_and_builds_its_docs(sdist: Path, tmp_path: Path) -> None:
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    unpacked = tmp_path / NAME
    done = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:idemclient",
            ),
            *("tests/test_public_api.py", "tests/test_architecture_doc.py", "tests/unit"),
        ],
        cwd=unpacked,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\d+ passed", done.stdout)
    # And its documentation builds, strictly, links and anchors checked.
    site = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", "site"],
        cwd=unpacked,
        env={**os.environ, "PYTHONPATH": str(unpacked), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert site.returncode == 0, site.stdout[-3000:] + site.stderr[-3000:]
    assert (unpacked / "site" / "reference" / "api" / "index.html").exists()


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A brand-new virtual environment with the wheel installed, no extras."""
    folder = tmp_path_factory.mktemp("fresh")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheelhouse = Path(os.environ.get("IDEMCLIENT_WHEELHOUSE", Path(sys.prefix) / "wheelhouse"))
    wheelhouse.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    offline = [
        *pip,
        *("install", "--quiet", "--no-index", "--find-links", str(wheel.parent)),
        *("--find-links", str(wheelhouse), str(wheel)),
    ]
    if subprocess.run(offline, capture_output=True, check=False).returncode != 0:
        # Something the wheel needs is not in the wheelhouse yet: fetch it once.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--dest",
                str(wheelhouse),
                str(wheel),
            ],
            capture_output=True,
            check=True,
        )
        for copy in wheelhouse.glob("idemclient-*"):
            copy.unlink()  # the wheel under test is always the one given
        subprocess.run(offline, capture_output=True, check=True)
    return python


def _run_fresh(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    return subprocess.run(
        [str(python), "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_the_wheel_without_extras_runs_the_readme_example(fresh: Path, tmp_path: Path) -> None:
    [example] = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    done = _run_fresh(fresh, example, tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"succeeded pay_[0-9a-f]+\n", done.stdout), done.stdout


def test_the_installed_package_is_the_wheels_and_has_no_extras(fresh: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.util, idemclient\n"
        "print(idemclient.__file__)\n"
        "print(idemclient.__version__)\n"
        "print([m for m in ('uvicorn', 'psycopg', 'cryptography', 'opentelemetry')"
        " if importlib.util.find_spec(m)])\n"
    )
    done = _run_fresh(fresh, code, tmp_path)
    assert done.returncode == 0, done.stderr
    where, version, extras = done.stdout.splitlines()
    assert Path(where).is_relative_to(fresh.parents[1])  # not the checkout
    assert version == idemclient.__version__
    assert extras == "[]"
    command = subprocess.run(
        [str(fresh.parent / "idemclient"), "--version"], capture_output=True, text=True
    )
    assert command.returncode == 0, command.stderr
    assert idemclient.__version__ in command.stdout
