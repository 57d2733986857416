"""The commands a batch run prints for its rows: whole, quoted, to be pasted as they are.

A reason that says "settle it with idemclient ops reconcile ..." is worth what the
command does when pasted. So it names the store the run used (`--store`, its absolute
path) and the server (`--url`, without credentials), and the run's look-up where it is
not the one `ops reconcile` takes for a batch row without one (`{path}?reference=
{reference}`, the batch's default), with the run's `--lookup-status`, `--reliable-404`
and `--in-flight-for`. The token is never printed: `ops reconcile` reads it from
`IDEMCLIENT_TOKEN`, as the run does. Every argument is quoted for a POSIX shell.

A row that may have been applied and is past the key retention is never sent again; a
rerun settles it only through its look-up, and only a look-up by the reference alone
can tell "never applied" once the server has forgotten the key. Without such a look-up
(`--no-lookup`, or one by `{key}`) a rerun leaves it as it was, every time: such a row
is the operator's to settle (`rerun_settles`), and the run says so instead of "run
again".
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from .. import State
from .._seam import POSTGRES_SCHEMES, origin_of, reconcile, redact_url
from ..profiles import BUILTIN, Profile
from ._lookup import DEFAULT_LOOKUP, LookupSettings

__all__ = ["Commands", "rerun_settles"]


def rerun_settles(lookup: LookupSettings | None) -> bool:
    """Whether running the file again can settle a row that may have been applied and
    is past the key retention: only through a look-up by the reference alone."""
    return lookup is not None and reconcile.by_reference_alone(lookup.template)


@dataclass(frozen=True, slots=True)
class Commands:
    """The commands a run prints, made from its settings once."""

    store: str
    url: str
    #: `--lookup` for `ops reconcile`, or None where its default for a batch row is the
    #: run's (or the run had none)
    lookup: str | None = None
    statuses: tuple[tuple[str, str], ...] = ()
    reliable_404: bool = False
    in_flight_for: float | None = None

    @classmethod
    def of(
        cls,
        *,
        store: str,
        base_url: httpx.URL,
        path: str,
        lookup: LookupSettings | None,
        profile: Profile,
    ) -> Commands:
        where = store if store.startswith(POSTGRES_SCHEMES) else os.path.abspath(store)
        template = None
        statuses: tuple[tuple[str, str], ...] = ()
        reliable_404 = False
        if lookup is not None:
            if lookup.template != DEFAULT_LOOKUP.replace("{path}", path):
                template = lookup.template
            statuses = _extra_statuses(lookup.rules.statuses)
            reliable_404 = lookup.rules.reliable_404
        builtin = BUILTIN.get(profile.name)
        in_flight_for = (
            profile.in_flight_for
            if builtin is None or builtin.in_flight_for != profile.in_flight_for
            else None
        )
        return cls(
            store=where,
            url=str(redact_url(base_url)).rstrip("/"),
            lookup=template,
            statuses=statuses,
            reliable_404=reliable_404,
            in_flight_for=in_flight_for,
        )

    def reconcile(self, operation_id: str, *, where: str | None = None) -> str:
        """`idemclient ops reconcile` for one operation; `where`: a URL the operation
        went to other than the run's (its origin is the server asked)."""
        url = self.url if where is None else origin_of(where)
        args = ["idemclient", "ops", "reconcile", operation_id, "--store", self.store]
        args += ["--url", url]
        if self.lookup is not None:
            args += ["--lookup", self.lookup]
        for name, state in self.statuses:
            args += ["--status", f"{name}={state}"]
        if self.reliable_404:
            args.append("--reliable-404")
        if self.in_flight_for is not None:
            args += ["--in-flight-for", f"{self.in_flight_for:g}"]
        return _shell(args)

    def show(self, operation_id: str) -> str:
        """`idemclient ops show` for one operation."""
        return _shell(["idemclient", "ops", "show", operation_id, "--store", self.store])


def _extra_statuses(statuses: Mapping[str, State]) -> tuple[tuple[str, str], ...]:
    """The statuses a run mapped beyond (or unlike) the defaults, as `--status` takes them."""
    defaults = reconcile.DEFAULT_STATUSES
    return tuple(
        (name, state.value)
        for name, state in sorted(statuses.items())
        if defaults.get(name) is not state
    )


def _shell(args: list[str]) -> str:
    return " ".join(shlex.quote(arg) for arg in args)
