"""The public surface: the top level is exactly `__all__`, every other name has a home in
a module of its topic, and a name that left the top level still resolves there, warning.

The order of `__all__` is kept by ruff (RUF022).
"""

import importlib
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import idemclient
import idemclient._errors
import idemclient.batch
import idemclient.inbox

#: The top level, pinned: what a caller uses every day.
TOP_LEVEL = {
    "AnswerNotKept",
    "AsyncClient",
    "Client",
    "IdemError",
    "Indeterminate",
    "KeyConflict",
    "ManualClock",
    "NotSent",
    "Outcome",
    "OutcomeError",
    "ReconcileRequired",
    "RetryPolicy",
    "State",
    "StoreError",
    "__version__",
    "aresume",
    "key_from_identity",
    "new_key",
    "outcome_of",
    "resume",
    "wrap",
}

#: Every name that left the top level, and where it lives now.
MOVED = {
    "DEFAULT_NAMESPACE": "idemclient.keys",
    "derive_key": "idemclient.keys",
    "validate_key": "idemclient.keys",
    "RetryBudget": "idemclient.policy",
    "parse_retry_after": "idemclient.policy",
    "Store": "idemclient.store",
    "SQLiteStore": "idemclient.store",
    "Durability": "idemclient.store",
    "BodyEncryption": "idemclient.store",
    "OperationRecord": "idemclient.store",
    "Hooks": "idemclient.hooks",
    "AttemptEvent": "idemclient.hooks",
    "RetryEvent": "idemclient.hooks",
    "Clock": "idemclient.clock",
    "SystemClock": "idemclient.clock",
    "set_testing": "idemclient.clock",
    "IdempotentTransport": "idemclient.transport",
    "AsyncIdempotentTransport": "idemclient.transport",
    "InvalidKey": "idemclient.errors",
    "RequestNotReplayable": "idemclient.errors",
    "OperationMismatch": "idemclient.errors",
    "StoreCorrupt": "idemclient.errors",
    "ForeignStore": "idemclient.errors",
    "StoreTooNew": "idemclient.errors",
    "StoreUnavailable": "idemclient.errors",
    "BatchInvalid": "idemclient.batch",
    "InvalidMessageId": "idemclient.inbox",
    "SignatureInvalid": "idemclient.inbox",
}

#: The public modules beside the top level, each holding the whole of its topic.
MODULES = {
    "idemclient.errors": {
        "AnswerNotKept",
        "ChallengeRequired",
        "ForeignStore",
        "IdemError",
        "Indeterminate",
        "InvalidKey",
        "KeyConflict",
        "MissingKey",
        "NotSent",
        "OperationFailed",
        "OperationMismatch",
        "OutcomeError",
        "ProfileMismatch",
        "ReconcileRequired",
        "RequestNotReplayable",
        "StoreCorrupt",
        "StoreError",
        "StoreTooNew",
        "StoreUnavailable",
    },
    "idemclient.keys": {
        "DEFAULT_NAMESPACE",
        "derive_key",
        "key_from_identity",
        "new_key",
        "validate_key",
    },
    "idemclient.policy": {"RetryBudget", "RetryPolicy", "parse_retry_after"},
    "idemclient.store": {
        "AdminStore",
        "Begin",
        "BodyEncryption",
        "BriefFinish",
        "Claim",
        "Durability",
        "Intent",
        "MemoryStore",
        "NotFound",
        "OperationRecord",
        "OperationStore",
        "Progress",
        "SQLiteStore",
        "ServerTime",
        "Store",
        "StoredResponse",
        "holder_is_live",
        "new_owner",
        "owner_is_dead",
        "owner_sent_until",
        "release_owner",
    },
    "idemclient.hooks": {
        "AttemptEndEvent",
        "AttemptEvent",
        "EndEvent",
        "Hooks",
        "RetryEvent",
        "StartEvent",
        "StoreEvent",
        "drop_legacy_fields",
    },
    "idemclient.otel": {"otel_hooks"},
    "idemclient.clock": {"Clock", "ManualClock", "SystemClock", "set_testing"},
    "idemclient.transport": {"AsyncIdempotentTransport", "IdempotentTransport"},
    "idemclient.profiles": {
        "BUILTIN",
        "DEFAULT",
        "Endpoint",
        "Existing",
        "KeyFormat",
        "KeySlot",
        "Lookup",
        "Match",
        "Profile",
        "adyen",
        "checkout",
        "django_idempotency_key",
        "drf_idempotency_key",
        "generic",
        "gocardless",
        "ietf",
        "mollie",
        "named",
        "paypal",
        "razorpay",
        "reference",
        "square",
        "stripe",
        "wise",
    },
}


def test_the_top_level_is_pinned() -> None:
    assert set(idemclient.__all__) == TOP_LEVEL
    assert len(idemclient.__all__) == len(TOP_LEVEL) == 21


def test_all_names_exist_once() -> None:
    assert len(idemclient.__all__) == len(set(idemclient.__all__))
    for name in idemclient.__all__:
        assert hasattr(idemclient, name), name


def test_nothing_public_is_left_out_of_all() -> None:
    # The top level imports most names at their first use: dir() lists them all.
    public = {
        name
        for name in dir(idemclient)
        if not name.startswith("_") and not isinstance(getattr(idemclient, name), types.ModuleType)
    }
    assert public == set(idemclient.__all__) - {"__version__"}
    assert {f"idemclient.{name}" for name in dir(idemclient)} >= set(MODULES)


def test_importing_the_top_level_warns_about_nothing_and_brings_the_topics() -> None:
    script = "import idemclient; from idemclient import *\n" + "\n".join(
        f"idemclient.{module.removeprefix('idemclient.')}.{name}"
        for module, names in MODULES.items()
        for name in names
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_exports_its_topic(module: str) -> None:
    imported = importlib.import_module(module)
    assert set(imported.__all__) == MODULES[module]
    for name in imported.__all__:
        assert hasattr(imported, name), name


def test_a_name_at_the_top_is_the_same_object_in_its_module() -> None:
    for module, names in MODULES.items():
        imported = importlib.import_module(module)
        for name in names & TOP_LEVEL:
            assert getattr(imported, name) is getattr(idemclient, name), (module, name)


def test_the_moved_names_are_the_ones_declared() -> None:
    assert idemclient._MOVED == MOVED
    assert not set(MOVED) & TOP_LEVEL
    # The old surface, every name of it, still resolves.
    assert len(TOP_LEVEL | set(MOVED) | {"Rejected"}) == 50


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_warns_and_resolves_to_the_same_object(name: str) -> None:
    home = MOVED[name]
    expected = getattr(importlib.import_module(home), name)
    with pytest.warns(DeprecationWarning, match=rf"idemclient\.{name} .*{home}\.{name}") as told:
        found = getattr(idemclient, name)
    assert found is expected
    assert name in importlib.import_module(home).__all__
    assert name not in idemclient.__all__
    assert told[0].filename == __file__  # points at the caller's line


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_still_imports_from_the_top_level(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=MOVED[name]):
        exec(f"from idemclient import {name}", {})


def test_rejected_is_deprecated_and_still_the_base_of_key_conflict() -> None:
    with pytest.warns(DeprecationWarning, match="never raised"):
        rejected = idemclient.Rejected
    assert rejected is idemclient._errors.Rejected
    assert issubclass(idemclient.KeyConflict, rejected)  # `except Rejected` still catches it
    assert not issubclass(idemclient.Indeterminate, rejected)
    assert not issubclass(idemclient.NotSent, rejected)
    for module in MODULES:
        assert "Rejected" not in importlib.import_module(module).__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no_such_name"):
            _ = idemclient.no_such_name


def _errors_of(module: types.ModuleType) -> set[type[BaseException]]:
    return {
        value
        for value in (getattr(module, name) for name in module.__all__)
        if isinstance(value, type) and issubclass(value, BaseException)
    }


def test_every_error_derives_from_the_one_root() -> None:
    errors = _errors_of(importlib.import_module("idemclient.errors"))
    features = _errors_of(idemclient.batch) | _errors_of(idemclient.inbox)
    assert len(errors) == 19
    assert {error.__name__ for error in features} == {
        "BatchInvalid",
        "InvalidMessageId",
        "SignatureInvalid",
    }
    tree = idemclient._errors.__doc__ or ""
    for error in errors | features:
        assert issubclass(error, idemclient.IdemError), error
        assert vars(idemclient._errors)[error.__name__] is error  # one tree, in one file
        assert re.search(rf"\b{error.__name__}\b", tree), error  # and drawn there
    # Named after the module a caller imports it from (tracebacks print this name).
    for error in errors:
        assert error.__module__ == "idemclient.errors", error
    for error in features:
        home = "idemclient.batch" if error.__name__ == "BatchInvalid" else "idemclient.inbox"
        assert error.__module__ == home, error
        assert getattr(importlib.import_module(home), error.__name__) is error


def test_indeterminate_and_not_sent_are_never_failures() -> None:
    assert issubclass(idemclient.ReconcileRequired, idemclient.Indeterminate)
    assert not issubclass(idemclient.Indeterminate, idemclient.KeyConflict)
    assert not issubclass(idemclient.NotSent, idemclient.KeyConflict)


def test_the_api_reference_documents_the_surface() -> None:
    """docs/reference/api.md follows the surface: each top-level name under its own
    path, each other name of a topic module under that module, and no old path."""
    reference = (Path(__file__).parents[1] / "docs" / "reference" / "api.md").read_text()
    blocks = re.findall(r"^::: (\S+)\n((?:    .*\n)*)", reference, flags=re.M)
    documented = {path for path, _ in blocks}
    whole = {path for path, options in blocks if "members: false" not in options}
    for name in TOP_LEVEL - {"__version__"}:
        assert f"idemclient.{name}" in documented, name
    for module, names in MODULES.items():
        assert module in documented, module
        for name in names - TOP_LEVEL:
            assert f"{module}.{name}" in documented or module in whole, (module, name)
    assert not {f"idemclient.{name}" for name in [*MOVED, "Rejected"]} & documented
