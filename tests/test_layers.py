"""The package's layers, declared once here, and the contracts between them.

From the bottom up: the values (what an operation is and how an answer is judged), the
store's interface (its records and protocol), the engine (the decisions of one
operation, sans I/O), the store's backends, the httpx adapters and clients, and the
features built on the client. A module imports only its own layer and the layers
below it; the lower layers import no I/O library; a feature uses the public surface,
its own modules and the seams named for it, never another feature's private modules;
and no import cycle exists, counting imports made inside functions and those made
only for the type checker (`if TYPE_CHECKING:`), which a cycle needs no less.

Every import is read from the source (`ast`), wherever it stands in a module.
docs/architecture.md draws the layers from `LAYERS` (`test_the_architecture_page_draws_
these_layers`: run this file as a script to print the block it must hold).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "idemclient"
PAGE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Layer:
    name: str
    #: what it holds, in words (drawn on the architecture page)
    holds: str
    #: its modules: a name covers a package's submodules, the most precise name wins
    modules: tuple[str, ...]
    #: top-level packages its modules never import (at all: not even inside a function)
    never: frozenset[str] = frozenset()


#: Libraries that do I/O of their own: no value, store record or decision imports one.
IO = frozenset(
    {"sqlite3", "sqlite_utils", "click", "psycopg", "psycopg_pool", "socket", "subprocess"}
)
#: httpx's names that send: the lower layers use httpx's messages (Request, Response,
#: URL, Headers, the error classes), never a client or a transport.
HTTPX_SENDS = frozenset(
    {
        "Client",
        "AsyncClient",
        "BaseTransport",
        "AsyncBaseTransport",
        "HTTPTransport",
        "AsyncHTTPTransport",
        "MockTransport",
        "WSGITransport",
        "ASGITransport",
        "request",
        "stream",
        "get",
        "options",
        "head",
        "post",
        "put",
        "patch",
        "delete",
    }
)

#: The layers, from the bottom up. A module imports its own layer and those below.
LAYERS: tuple[Layer, ...] = (
    Layer(
        "values",
        "what an operation is and how an answer is judged: outcome, the state table, errors,"
        " keys, policy, classification, clocks, hooks, redaction, profile data",
        (
            "idemclient._version",
            "idemclient._errors",
            "idemclient.errors",
            "idemclient._outcome",
            "idemclient._frozen",
            "idemclient._states",
            "idemclient._keys",
            "idemclient.keys",
            "idemclient._fingerprint",
            "idemclient._frame",
            "idemclient._redaction",
            "idemclient._profile",
            "idemclient.profiles",
            "idemclient._classify",
            "idemclient._retry_after",
            "idemclient._budget",
            "idemclient._policy",
            "idemclient.policy",
            "idemclient._forks",
            "idemclient._clock",
            "idemclient.clock",
            "idemclient._time",
            "idemclient._server_time",
            "idemclient._hooks",
            "idemclient.hooks",
        ),
        IO | {"opentelemetry"},
    ),
    Layer(
        "store interface",
        "the store's records and protocol, leases' owners, encryption at rest: what the"
        " engine reads and writes, without a database",
        (
            "idemclient._store._base",
            "idemclient._store._interface",
            "idemclient._store._rows",
            "idemclient._store._owners",
            "idemclient._store._cipher",
        ),
        IO - {"socket"} | {"opentelemetry"},  # an owner is named by its host
    ),
    Layer(
        "engine",
        "the decisions of one operation, sans I/O: one call, a stored answer given back,"
        " the host's profile, settling by a look-up",
        (
            "idemclient._hosts",
            "idemclient._settings",
            "idemclient._intent",
            "idemclient._evidence",
            "idemclient._call",
            "idemclient._reading",
            "idemclient._deciding",
            "idemclient._telling",
            "idemclient._deadline",
            "idemclient._clock_steps",
            "idemclient._answer",
            "idemclient._reconcile",
        ),
        IO | {"opentelemetry"},
    ),
    Layer(
        "store",
        "the store's backends (SQLite, PostgreSQL), its schemas and migrations, and the"
        " one database layer under the store, the inbox and the reference server",
        ("idemclient._db", "idemclient._store", "idemclient.store"),
        frozenset({"click", "opentelemetry"}),
    ),
    Layer(
        "adapters",
        "httpx's side: the transports, the wrapped client's send, an operation issued"
        " again, the effects' drivers, Client and AsyncClient",
        (
            "idemclient._retrofit",
            "idemclient._reissue",
            "idemclient._exchange",
            "idemclient._effects",
            "idemclient._admission",
            "idemclient._following",
            "idemclient._flow",
            "idemclient._deferred",
            "idemclient._behind",
            "idemclient._worker",
            "idemclient._transport",
            "idemclient.transport",
            "idemclient._operations",
            "idemclient._steps",
            "idemclient._wrap",
            "idemclient._resume",
            "idemclient._client_base",
            "idemclient._client_request",
            "idemclient._client_reconcile",
            "idemclient._async_client",
            "idemclient._client",
            "idemclient._seam",
        ),
        frozenset({"sqlite3", "sqlite_utils", "click", "psycopg", "opentelemetry"}),
    ),
    Layer(
        "features",
        "built on the client, each through the public surface and its named seams",
        (
            "idemclient",
            "idemclient.__main__",
            "idemclient.batch",
            "idemclient.inbox",
            "idemclient.postgres",
            "idemclient.otel",
            "idemclient._otel",
            "idemclient.cli",
            "idemclient._ops_cli",
            "idemclient._ops_lines",
            "idemclient._cli_options",
            "idemclient._cli_store",
            "idemclient._cli_errors",
            "idemclient._cli_duration",
            "idemclient.testing",
            "idemclient._pytest_plugin",
        ),
    ),
)

#: A private module every layer may use as if it were public: each class in it is public,
#: under its public home (`idemclient.errors`, `idemclient.inbox`, `idemclient.batch`).
ERROR_TREE = "idemclient._errors"


@dataclass(frozen=True)
class Feature:
    modules: tuple[str, ...]
    #: the private modules (of the layers below) it may use, each with why
    seams: dict[str, str]


#: The features, and the one seam (or few, each named) through which each reaches below
#: the public surface.
FEATURES: dict[str, Feature] = {
    "batch": Feature(
        ("idemclient.batch",),
        {
            "idemclient._seam": "the batch's one way below the client's public surface:"
            " registered intents, effects, look-ups, the store's records, time",
            "idemclient._cli_store": "`batch submit` takes `--store` as every command does",
            "idemclient._cli_options": "the options `batch submit` shares with `ops`",
            "idemclient._cli_errors": "`batch submit` reports an error as every command does",
            "idemclient._cli_duration": "durations as every command takes them",
        },
    ),
    "inbox": Feature(
        ("idemclient.inbox",),
        {"idemclient._db": "its storage on the one database layer"},
    ),
    "postgres": Feature(
        ("idemclient.postgres",),
        {
            "idemclient._db": "the inbox on PostgreSQL, on the one database layer",
            "idemclient._store._postgres": "the PostgreSQL store, whose public home it is",
            "idemclient._seam": "the outbox records an intent ahead and sends it through"
            " the features' seam, as the batch does",
        },
    ),
    "otel": Feature(
        ("idemclient.otel", "idemclient._otel"),
        {
            "idemclient._redaction": "a span shows a URL as the logs do, secrets redacted",
            # The top level holds these too, but it imports this feature for the type
            # checker (`idemclient.otel`): taken from there, they would close a cycle.
            "idemclient._outcome": "an outcome's state names a span's status",
            "idemclient._version": "the instrumentation's version",
            "idemclient._forks": "the lock its calls take is made afresh in a forked child,"
            " as the client's own are",
        },
    ),
    "commands": Feature(
        (
            "idemclient.__main__",
            "idemclient.cli",
            "idemclient._ops_cli",
            "idemclient._ops_lines",
            "idemclient._cli_options",
            "idemclient._cli_store",
            "idemclient._cli_errors",
            "idemclient._cli_duration",
        ),
        {
            "idemclient._seam": "a command opens the store `--store` names, and judges a"
            " look-up, as the client does",
        },
    ),
    "testing": Feature(
        ("idemclient.testing", "idemclient._pytest_plugin"),
        {
            # The reference server is the server's half of the protocol: it reads the
            # rules both halves share from their one home, never from a copy.
            "idemclient._db": "its storage on the one database layer",
            "idemclient._profile": "it speaks each profile's dialect, from the server's side",
            "idemclient._reconcile": "it reads a look-up template's quoting as the client"
            " writes it",
            "idemclient._fingerprint": "the store contract's intents carry the fingerprint"
            " a client records for them",
        },
    ),
}

#: Imports that break a rule today, each with why it stands and what removes it. The
#: test fails when one is no longer made, so the list only shrinks.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # -- the command group mounts each feature's command -----------------------------------
    ("idemclient.cli", "idemclient.batch._cli"): "mounts `batch submit`: goes with batch's seam",
    ("idemclient.cli", "idemclient.testing._adapters.cli"): "mounts `idemclient server`, loaded"
    " by name when asked for (see `BY_NAME`)",
    ("idemclient._ops_cli", "idemclient.batch._identity"): "a batch row's look-up by"
    " default: goes with batch's seam",
    ("idemclient._ops_cli", "idemclient.batch._lookup"): "the batch's default look-up:"
    " goes with batch's seam",
}

#: Cycles that stand today (the modules of each), with what removes them.
CYCLES: dict[frozenset[str], str] = {}


# -- reading the imports ---------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    importer: str
    #: the module imported (of idemclient), or the top-level package (any other)
    target: str
    #: "" for an idemclient module, else the names taken from it ("*" for the module)
    names: tuple[str, ...]
    line: int
    #: at the top, inside a function, or for the type checker only
    kind: str

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} ({self.kind}, line {self.line})"

    @property
    def edge(self) -> str:
        return f"{self.importer} -> {self.target} (line {self.line})"


def _nearest_module(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def imports_of(name: str) -> Iterator[Import]:
    """Every import of module `name`, wherever it stands (module level, in a function,
    under `if TYPE_CHECKING:`), resolved to the module it names."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, kind: str) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = kind
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = "typing"
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and kind == "top":
                inner = "lazy"
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield _resolved(alias.name, ("*",), child.lineno, inner)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    source = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    source = child.module or ""
                for alias in child.names:
                    if f"{source}.{alias.name}" in MODULES:  # `from . import _reconcile`
                        yield _resolved(f"{source}.{alias.name}", ("*",), child.lineno, inner)
                    else:
                        yield _resolved(source, (alias.name,), child.lineno, inner)
            yield from walk(child, inner)

    def _resolved(target: str, names: tuple[str, ...], line: int, kind: str) -> Import:
        if target.split(".")[0] == "idemclient":
            return Import(name, _nearest_module(target), names, line, kind)
        return Import(name, target.split(".")[0], names, line, kind)

    yield from walk(ast.parse(path.read_text()), "top")


#: Imports made by name (`importlib.import_module`), which the source's import statements
#: do not show: importer -> {module: why}. Every module that imports by name is here.
BY_NAME: dict[str, dict[str, str]] = {
    # The top level imports each everyday name at its first use; its imports for the
    # type checker name the same modules, and it is the top of every layer anyway.
    "idemclient": {},
    "idemclient.cli": {
        "idemclient.testing._adapters.cli": "`idemclient server`, loaded when asked for"
    },
}

IMPORTS: list[Import] = [found for name in MODULES for found in imports_of(name)] + [
    Import(importer, target, ("*",), 0, "by name")
    for importer, targets in BY_NAME.items()
    for target in targets
]
INTERNAL = [f for f in IMPORTS if f.target in MODULES and f.target != f.importer]


def _owner(name: str, groups: dict[str, tuple[str, ...]]) -> str | None:
    """The group whose most precise module name covers `name`."""
    best: tuple[int, str] | None = None
    for group, modules in groups.items():
        for module in modules:
            covers = name == module or name.startswith(module + ".")
            if covers and (best is None or len(module) > best[0]):
                best = (len(module), group)
    return None if best is None else best[1]


LAYER_OF = {name: _owner(name, {la.name: la.modules for la in LAYERS}) for name in MODULES}
RANK = {layer.name: rank for rank, layer in enumerate(LAYERS)}
FEATURE_OF = {name: _owner(name, {f: s.modules for f, s in FEATURES.items()}) for name in MODULES}


def is_public(name: str) -> bool:
    return not any(part.startswith("_") and part != "__main__" for part in name.split("."))


def _seam_of(feature: str, target: str) -> bool:
    return any(target == seam or target.startswith(seam + ".") for seam in FEATURES[feature].seams)


def _excepted(found: Import) -> bool:
    return (found.importer, found.target) in EXCEPTIONS


# -- the contracts ---------------------------------------------------------------------


def test_every_module_is_in_one_layer() -> None:
    assert [name for name, layer in LAYER_OF.items() if layer is None] == []
    named = [module for layer in LAYERS for module in layer.modules]
    assert [module for module in named if module not in MODULES] == []
    assert len(named) == len(set(named))


def test_every_feature_module_is_in_the_features_layer() -> None:
    for name, feature in FEATURE_OF.items():
        assert (feature is None) == (LAYER_OF[name] != "features" or name == "idemclient"), name


@pytest.mark.parametrize("layer", [layer.name for layer in LAYERS])
def test_a_layer_imports_only_itself_and_the_layers_below(layer: str) -> None:
    upward = [
        found.edge
        for found in INTERNAL
        if LAYER_OF[found.importer] == layer
        and RANK[LAYER_OF[found.target] or ""] > RANK[layer]
        and not _excepted(found)
    ]
    assert sorted(set(upward)) == []


@pytest.mark.parametrize("layer", [layer for layer in LAYERS if layer.never], ids=lambda x: x.name)
def test_the_lower_layers_import_no_io(layer: Layer) -> None:
    found = [
        str(found)
        for found in IMPORTS
        if LAYER_OF[found.importer] == layer.name and found.target in layer.never
    ]
    assert found == []


@pytest.mark.parametrize("layer", ["values", "store interface", "engine"])
def test_the_lower_layers_use_httpx_messages_never_a_client_or_transport(layer: str) -> None:
    sends: list[str] = []
    for name, path in MODULES.items():
        if LAYER_OF[name] != layer:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "httpx"
                and node.attr in HTTPX_SENDS
            ):
                sends.append(f"{name}: httpx.{node.attr} (line {node.lineno})")
        sends += [
            f"{name}: from httpx import {n} (line {found.line})"
            for found in IMPORTS
            if found.importer == name and found.target == "httpx"
            for n in found.names
            if n in HTTPX_SENDS
        ]
    assert sends == []


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_feature_uses_the_public_surface_its_own_modules_and_its_seams(feature: str) -> None:
    def allowed(target: str) -> bool:
        return (
            is_public(target)
            or target == ERROR_TREE
            or FEATURE_OF[target] == feature
            or _seam_of(feature, target)
        )

    reached = [
        found.edge
        for found in INTERNAL
        if FEATURE_OF[found.importer] == feature
        and not allowed(found.target)
        and not _excepted(found)
    ]
    assert sorted(set(reached)) == []


def test_no_feature_uses_another_features_private_modules() -> None:
    crossing = [
        found.edge
        for found in INTERNAL
        if FEATURE_OF[found.importer] is not None
        and FEATURE_OF[found.target] not in (None, FEATURE_OF[found.importer])
        and not is_public(found.target)
        and not _seam_of(FEATURE_OF[found.importer] or "", found.target)
        and not _excepted(found)
    ]
    assert sorted(set(crossing)) == []


def test_every_seam_named_is_used() -> None:
    unused = [
        (feature, seam)
        for feature, spec in FEATURES.items()
        for seam in spec.seams
        if not any(
            FEATURE_OF[found.importer] == feature
            and (found.target == seam or found.target.startswith(seam + "."))
            for found in INTERNAL
        )
    ]
    assert unused == []


def test_every_import_by_name_is_declared() -> None:
    by_name: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        calls = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] in ("import_module", "__import__")
        ]
        if calls:
            named = {
                node.value
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and node.value in MODULES
            }
            by_name[name] = named
    assert sorted(by_name) == sorted(BY_NAME)
    for importer, targets in BY_NAME.items():
        assert set(targets) <= by_name[importer], importer


def test_every_exception_is_still_needed() -> None:
    made = {(found.importer, found.target) for found in INTERNAL}
    assert [pair for pair in EXCEPTIONS if pair not in made] == []


def cycles() -> list[frozenset[str]]:
    """The strongly connected parts of the import graph (every kind of import) with
    more than one module: each is a cycle, or several."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for found in INTERNAL:
        graph[found.importer].add(found.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(name: str) -> None:  # Tarjan's, on a graph of about 150 modules
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == name:
                    break
            if len(part) > 1:
                found.append(frozenset(part))

    for name in graph:
        if name not in index:
            visit(name)
    return found


def test_no_import_cycles_even_through_lazy_and_typing_imports() -> None:
    found = cycles()
    described = [
        sorted(part)
        + [str(f) for f in INTERNAL if f.importer in part and f.target in part and f.kind != "top"]
        for part in found
        if part not in CYCLES
    ]
    assert described == []
    assert [sorted(part) for part in CYCLES if part not in found] == []


# -- what importing loads --------------------------------------------------------------

HEAVY = ("sqlite_utils", "click", "idemclient.testing", "psycopg", "opentelemetry")


def _loaded(code: str) -> set[str]:
    """The modules `code` adds to those a bare interpreter has after `import httpx`
    (httpx loads click for its own command line, where click is installed)."""
    script = (
        "import sys, json\nimport httpx\nbefore = set(sys.modules)\n"
        + textwrap.dedent(code)
        + "\nprint(json.dumps(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "click" or m.startswith(HEAVY))


def test_importing_idemclient_loads_neither_sqlite_utils_nor_click_nor_the_server() -> None:
    script = "import sys, json\nimport idemclient\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert _heavy(loaded) == []


def test_the_engine_loads_no_database_no_command_line_and_no_server() -> None:
    below = ("values", "store interface", "engine")
    engine = [name for name, layer in LAYER_OF.items() if layer in below]
    loaded = _loaded("\n".join(f"import {name}" for name in engine))
    assert _heavy(loaded) == []
    # The store's interface is read without its backends: no database is loaded.
    assert sorted(m for m in loaded if m.startswith(("sqlite3", "idemclient._db"))) == []


# -- the page that draws them ----------------------------------------------------------


def drawing() -> str:
    """The layers as docs/architecture.md draws them, from the top down."""
    lines: list[str] = []
    for layer in reversed(LAYERS):
        lines += textwrap.wrap(f"{layer.name}: {layer.holds}", 88, subsequent_indent="  ")
        names = sorted(module.removeprefix("idemclient.") for module in layer.modules)
        lines += textwrap.wrap(
            " ".join(names), 88, initial_indent="    | ", subsequent_indent="    | "
        )
    lines.append("")
    lines.append("seams (a feature's way below the public surface):")
    for feature, spec in FEATURES.items():
        seams = ", ".join(sorted(s.removeprefix("idemclient.") for s in spec.seams))
        lines.append(f"    {feature}: {seams}")
    return "\n".join(lines) + "\n"


def test_the_architecture_page_draws_these_layers() -> None:
    page = PAGE.read_text()
    start = page.index("<!-- layers: drawn from tests/test_layers.py -->")
    block = page[start:].split("```")[1]
    assert block.removeprefix("text\n") == drawing(), (
        "redraw the page's layers: python tests/test_layers.py"
    )


if __name__ == "__main__":
    print(drawing(), end="")


# -- rooms of one job -----------------------------------------------------------------------

#: The most lines a module of the package may hold (the reference server's, under
#: testing/, excepted: it is a server of its own), and the class that runs one operation.
MODULE_LINES = 600
CALL_LINES = 400


def test_no_module_of_the_package_outgrows_one_job() -> None:
    grown = {
        str(path.relative_to(ROOT)): lines
        for path in PACKAGE.rglob("*.py")
        if "testing" not in path.relative_to(PACKAGE).parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert not grown, f"split by job: modules over {MODULE_LINES} lines: {grown}"


def test_the_class_that_runs_one_operation_stays_small() -> None:
    tree = ast.parse((PACKAGE / "_call.py").read_text(encoding="utf-8"))
    (call,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Call"]
    assert call.end_lineno is not None
    lines = call.end_lineno - call.lineno + 1
    assert lines <= CALL_LINES, f"Call is {lines} lines: move a decision out (see _deciding)"
