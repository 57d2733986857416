"""Which profile a request speaks, by the host it goes to.

The built-in profiles name their providers' API hosts, production and sandbox
(`Profile.hosts`, with their sources in `idemclient.profiles`). A server reads its key
where its provider says, and nowhere else: under the default profile a PayPal server
finds no `PayPal-Request-Id`, so a lost answer sent again is a second payment. So:

- a client whose profile was not chosen speaks, at a known provider's host, that
  provider's profile, and logs it once per host; elsewhere, the default;
- a chosen profile always wins, but one that contradicts a known host (``"stripe"`` at
  ``api-m.paypal.com``, or the default chosen by name there) is refused there, for
  every request that either profile sends as an operation, before anything is recorded
  or sent (`ProfileMismatch`). A profile made from a built-in keeps its hosts, so
  ``profiles.stripe.replace(name="stripe-eu")`` is at home at ``api.stripe.com``;
- ``profile_by_host=False`` turns both off, for a host that really speaks another
  dialect (a proxy that rewrites the key, a test double listening at a provider's
  name): the profile given (or the default) is spoken everywhere, as before.

Each request's host is read (base URL or absolute URL alike, after `wrap()` as through
`Client`), so one client may talk to several providers.
"""

from __future__ import annotations

import functools
import threading

from ._errors import ProfileMismatch
from ._forks import afresh_in_child
from ._hooks import log_fields, logger
from ._profile import Profile
from .profiles import BUILTIN

__all__ = ["ByHost", "normal_host", "provider_at"]

#: How many hosts a client remembers the profile of (they are few; a client that calls
#: many hosts finds each again, and may log a provider's host once more).
_KEPT = 1024


def normal_host(host: str) -> str:
    """`host` as profiles name hosts: lower case, without the trailing dot of a fully
    qualified name (``api.stripe.com.`` is ``api.stripe.com``)."""
    return host.lower().rstrip(".")


@functools.lru_cache(maxsize=_KEPT)
def provider_at(host: str) -> Profile | None:
    """The built-in profile whose provider's API answers at `host`, if any."""
    host = normal_host(host)
    for profile in BUILTIN.values():
        if profile.answers_at(host):
            return profile
    return None


class ByHost:
    """One client's profile at each host: the one it chose (None: the default, or the
    host's provider's), and the known provider it contradicts there, if any."""

    def __init__(self, chosen: Profile | None, default: Profile) -> None:
        self.chosen = chosen
        self.default = default
        self._found: dict[str, tuple[Profile, Profile | None]] = {}
        self._told: set[str] = set()
        self._locks_afresh()
        afresh_in_child(self)  # a forked child's calls take the lock too

    def _locks_afresh(self) -> None:
        self._lock = threading.Lock()

    def at(self, host: str) -> tuple[Profile, Profile | None]:
        """The profile a request to `host` speaks, and the known provider there that it
        contradicts (None: none does)."""
        found = self._found.get(host)
        if found is None:
            with self._lock:
                found = self._find(host)
        return found

    def _find(self, host: str) -> tuple[Profile, Profile | None]:
        known = provider_at(host)
        chosen = self.chosen
        if chosen is not None:
            found = (
                chosen,
                None if known is None or chosen.answers_at(normal_host(host)) else known,
            )
        else:
            found = (known or self.default, None)
            if known is not None and host not in self._told:
                if len(self._told) >= _KEPT:
                    self._told.clear()
                self._told.add(host)
                logger.info(
                    "requests to %s speak the %s server profile: it is an API host of that"
                    " profile's provider, and no profile was chosen (profile= chooses one)",
                    host,
                    known.name,
                    extra=log_fields("profile_from_host", host=host, profile=known.name),
                )
        if len(self._found) >= _KEPT:
            self._found.clear()
        self._found[host] = found
        return found

    def refusal(self, host: str, method: str, path: str, known: Profile) -> ProfileMismatch:
        """The error for a request to `host` that the chosen profile contradicts."""
        chosen = self.chosen
        assert chosen is not None
        under = chosen.resolve(method, path, frozenset({method.upper()})).key.where
        there = known.resolve(method, path, frozenset({method.upper()})).key.where
        return ProfileMismatch(
            f"{method.upper()} {host}{path}: this client speaks the {chosen.name} server"
            f" profile, but {host} is an API host of the {known.name} profile's provider,"
            f" whose server reads the key from the {there} and means its own answers (the"
            f" {chosen.name} profile puts the key in the {under}). Nothing was recorded or"
            f" sent. Use profile={known.name!r}, or choose none (a known provider's host"
            " speaks its own); if this host really speaks the"
            f" {chosen.name} dialect (a proxy, a test double), pass profile_by_host=False",
            chosen=chosen.name,
            known=known.name,
            host=host,
        )
