"""A throwaway PostgreSQL cluster: initdb into a temporary folder, start it on a free
loopback port, hand out databases, stop it.

The test suite's PostgreSQL tests and `make bench` both start theirs with it. It is a
development tool, not part of the installed package: the benchmarks run from the
repository's root (`python -m benchmarks.run`) and import it from here.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres`
user (or `nobody`) through `runuser`, in a folder that user owns. Needs the server's
programs (initdb, pg_ctl: Debian's postgresql-15) and psycopg (the postgres extra).
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.support.ports import free_port

__all__ = ["Cluster", "ClusterError", "find_bindir"]

#: Where Debian and the official images put the server's programs.
_BINDIR_GLOBS = ("/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin")
_INSTALL_HINT = (
    "PostgreSQL 15 (initdb, pg_ctl) is needed by the PostgreSQL tests and benchmarks and"
    " was not found;"
    " install it (Debian: apt-get install -y postgresql-15) or set PG_BINDIR. .ci/run"
    " installs it when missing."
)


class ClusterError(RuntimeError):
    """The throwaway cluster could not be found, created or started."""


def _has_server(bindir: str) -> bool:
    return all(os.access(os.path.join(bindir, name), os.X_OK) for name in ("initdb", "pg_ctl"))


def find_bindir() -> str:
    """The folder holding initdb and pg_ctl: $PG_BINDIR, pg_config, or a known place."""
    candidates: list[str] = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(os.environ["PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if found:
            candidates.append(found)
    for pattern in _BINDIR_GLOBS:
        # Newest major version first: "15" sorts after "9" only as a number.
        candidates.extend(
            sorted(glob.glob(pattern), key=lambda p: [int(s) for s in p.split("/") if s.isdigit()])[
                ::-1
            ]
        )
    for bindir in candidates:
        if _has_server(bindir):
            return bindir
    raise ClusterError(f"{_INSTALL_HINT} Looked in: {candidates or list(_BINDIR_GLOBS)}")


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as, or None to run it as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ClusterError("running as root, and there is no 'postgres' or 'nobody' user to run as")


class Cluster:
    """One PostgreSQL server in a temporary folder. Use `start()`, then `stop()`."""

    SUPERUSER = "postgres"

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.user = _server_user()
        self.folder = Path(tempfile.mkdtemp(prefix="idemclient-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = 0
        self._options = ""
        self._started = False
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [os.path.join(self.bindir, args[0]), *args[1:]]
        if self.user is not None:
            if shutil.which("runuser") is not None:
                command = ["runuser", "-u", self.user.pw_name, "--", *command]
            else:  # su needs a shell: the server's user may have nologin as its own
                command = ["su", self.user.pw_name, "-s", "/bin/sh", "-c", shlex.join(command)]
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=120, cwd=self.folder
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise ClusterError(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
                f"\n{log}"
            )
        return done

    def start(self, *, durable: bool = False) -> None:
        """initdb and start. `durable=False` (tests) turns fsync off: the cluster is
        thrown away, and the store's own durability settings are checked by statement,
        not by pulling the plug. Benchmarks pass True, so a commit costs what it costs
        on this disk."""
        self._run(
            "initdb",
            "--pgdata",
            str(self.data),
            "--username",
            self.SUPERUSER,
            "--auth",
            "trust",  # a private cluster on loopback, gone at the end of the run
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
        )
        self.port = free_port()
        speed_over_safety = [] if durable else ["-c fsync=off", "-c full_page_writes=off"]
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.folder}",
                *speed_over_safety,
                "-c max_connections=200",
            ]
        )
        self._options = options
        self._run(
            "pg_ctl", "start", "--wait", "--timeout", "60", "-D", str(self.data),
            "-l", str(self.log), "-o", options,
        )  # fmt: skip
        self._started = True

    def halt(self) -> None:
        """Stop the server (its data kept), as an outage does: its clients' connections
        are ended and new ones refused, on the same port, until `resume()`."""
        self._run("pg_ctl", "stop", "--wait", "-m", "fast", "-D", str(self.data))
        self._started = False

    def resume(self) -> None:
        """Start the server `halt()` stopped, on the same port, with the same data."""
        self._run("pg_ctl", "start", "--wait", "--timeout", "60", "-D", str(self.data),
                  "-l", str(self.log), "-o", self._options)  # fmt: skip
        self._started = True

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            if self._started:
                self._run("pg_ctl", "stop", "--wait", "-m", "fast", "-D", str(self.data))
                self._started = False
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
