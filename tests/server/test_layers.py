"""The reference server's layers import downwards only (see docs/server.md, "How it is
built"): the protocol's rules know nothing of the server, the storage knows only the
rules, and the phase machine knows the rules and the storage, never an adapter.

Imports made only for the type checker (`if TYPE_CHECKING:`) are not counted: they
cost nothing at run time and cannot form a cycle there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import idemclient.testing

PACKAGE = Path(idemclient.testing.__file__).parent

# layer -> the layers (of idemclient.testing) its modules may import at run time
ALLOWED = {
    "_protocol": {"_protocol"},
    "_storage": {"_protocol", "_storage"},
    "_machine": {"_protocol", "_storage", "_machine"},
}


def layer_of(parts: tuple[str, ...]) -> str:
    """The layer of a module of idemclient.testing, from its path inside the package."""
    return parts[0].removesuffix(".py")


def runtime_imports(path: Path) -> list[tuple[str, ...]]:
    """The idemclient.testing modules `path` imports outside `if TYPE_CHECKING:`, as
    path parts inside the package."""
    tree = ast.parse(path.read_text())
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only |= {id(inner) for inner in ast.walk(node)}
    here = path.relative_to(PACKAGE).parent.parts
    found = []
    prefix = "idemclient.testing."
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [
                tuple(alias.name.removeprefix(prefix).split("."))
                for alias in node.names
                if alias.name.startswith(prefix)
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module and node.module.startswith(prefix):
                found.append(tuple(node.module.removeprefix(prefix).split(".")))
        elif isinstance(node, ast.ImportFrom) and node.level - 1 <= len(here):
            base = here[: len(here) - (node.level - 1)]
            if node.module:
                found.append((*base, *node.module.split(".")))
            else:  # `from .. import _server`: the names are modules
                found += [(*base, alias.name) for alias in node.names]
        # deeper relative imports reach above idemclient.testing: the rest of idemclient
    return found


MODULES = sorted(
    path for path in PACKAGE.rglob("*.py") if layer_of(path.relative_to(PACKAGE).parts) in ALLOWED
)


def test_every_layer_has_modules() -> None:
    layers = {layer_of(path.relative_to(PACKAGE).parts) for path in MODULES}
    assert layers == set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_layer_imports_only_the_layers_below_it(path: Path) -> None:
    layer = layer_of(path.relative_to(PACKAGE).parts)
    for target in runtime_imports(path):
        assert layer_of(target) in ALLOWED[layer], f"{layer} imports {'.'.join(target)}"
