"""`make docs` has teeth: the command of its recipe, run on a copy of the site with a
link to a page that does not exist and a link to a heading that does not exist, fails
and names both. (`mkdocs build --quiet` once turned strict off and let two broken links
through.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _docs_recipe() -> str:
    """The command `make docs` runs, with the test environment's programs."""
    makefile = (ROOT / "Makefile").read_text()
    [recipe] = re.findall(r"^docs: .*\n\t(.+)$", makefile, flags=re.M)
    return recipe.replace("$(BIN)", str(Path(sys.executable).parent))


def test_the_docs_target_is_strict_and_not_quiet() -> None:
    recipe = _docs_recipe()
    assert "--strict" in recipe
    assert "--quiet" not in recipe
    assert " -q" not in recipe


def test_a_broken_link_or_anchor_fails_the_docs_target(tmp_path: Path) -> None:
    site = tmp_path / "project"
    site.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", site / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", site / "docs")
    (site / "idemclient").symlink_to(ROOT / "idemclient")  # the API reference reads it
    page = site / "docs" / "concepts.md"
    page.write_text(
        page.read_text() + "\n\nSee [a page that is not there](no-such-page.md) and"
        " [a heading that is not there](client.md#no-such-heading).\n"
    )
    done = subprocess.run(
        _docs_recipe(),
        shell=True,
        cwd=site,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    # Each of the two is a warning of its own (strict fails on warnings).
    assert [line for line in warnings if "no-such-page.md" in line], output
    assert [line for line in warnings if "no-such-heading" in line], output


#: What every verb takes, idemclient's options and then httpx's.
VERB_OPTIONS = (
    *("key", "operation_id", "identity", "reference", "hooks"),
    *("content", "data", "files", "json", "params", "headers", "cookies", "auth"),
    *("follow_redirects", "timeout", "extensions"),
)


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_api_reference_shows_the_verbs_and_no_private_name(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "reference" / "api" / "index.html").read_text()
    for client in ("Client", "AsyncClient"):
        for verb in ("post", "put", "patch", "delete"):
            assert f'id="idemclient.{client}.{verb}"' in page, (client, verb)
            # Its signature names every option, with its type: not `url, **kwargs`.
            shown = _text(
                page.split(f'id="idemclient.{client}.{verb}"')[1].split('id="idemclient.')[0]
            )
            assert "kwargs" not in shown, (client, verb)
            for option in VERB_OPTIONS:
                assert f" {option} :" in shown, (client, verb, option)
    text = _text(page)
    # No private module or class is shown: `/_sandbox/` endpoints are the server's URLs.
    private = re.findall(r"(?<![/\w])_[A-Za-z]\w*|idemclient\._\w+", text)
    assert [name for name in private if name != "_sandbox"] == []
