"""The suite's PostgreSQL harness says what is missing instead of skipping."""

from __future__ import annotations

import shutil

import pytest

from tests.support import pgcluster as cluster


def test_a_machine_without_postgresql_gets_a_message_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PG_BINDIR", raising=False)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(cluster, "_BINDIR_GLOBS", ("/nonexistent/postgresql/*/bin",))
    with pytest.raises(cluster.ClusterError, match="apt-get install -y postgresql-15"):
        cluster.find_bindir()


def test_pg_bindir_names_the_programs_to_use(monkeypatch: pytest.MonkeyPatch) -> None:
    found = cluster.find_bindir()
    monkeypatch.setenv("PG_BINDIR", found)
    monkeypatch.setattr(cluster, "_BINDIR_GLOBS", ())
    assert cluster.find_bindir() == found
