"""As whom a row was sent: a one-way digest of the credentials, kept with the row.

A payment made with one set of credentials is not made for another: a row paid with a
test key (`sk_test_...`) is not paid in live mode, though the URL is the same; a row
paid for one account is not paid for another. So a row the store holds as finished is
done for this run only if it was finished where this run sends (its origin, see
`_plan`) and as whom this run sends.

The store never holds credentials (see `_redaction`). For each row the batch records,
it keeps a digest of them from which they cannot be read back: PBKDF2-HMAC-SHA256 over
the credentials, with a random salt drawn once per run and `ITERATIONS` rounds (a
guessed password costs that much to try, for each salt). It is kept in the fragment of
the row's stored URL::

    https://psp.example/v1/payouts#sent-as=v1.<salt>.<digest>

A fragment is never sent (HTTP sends a URL's path and query) and is part of neither the
request's fingerprint (`_fingerprint`) nor its origin (`_redaction.origin_of`): every
version reads, resumes and compares such a record as before, and no column is added.

The credentials are what the client sends with every request: the `Authorization` and
`Proxy-Authorization` headers, every other header whose name looks like a credential
(``X-Api-Key``, ``X-Auth-Token``), the URL's user and password, secret-looking query
parameters, and an `httpx.BasicAuth`. Cookies, session and signature headers are left
out: they change from run to run without changing the account. Credentials only an
auth flow adds at send time (other `httpx.Auth` classes) cannot be seen: such runs, and
rows recorded by earlier versions, have no digest, and are compared by origin only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field

import httpx

from .._seam import looks_secret

__all__ = ["ITERATIONS", "Sender", "credentials_of", "target_of"]

#: PBKDF2 rounds: about 50 ms once per run (and once per salt seen in the store).
ITERATIONS = 100_000
_MARK = "sent-as="
_VERSION = "v1"
_SALT_BYTES = 16
_DIGEST_BYTES = 16
#: Secret-looking headers that change without the account changing.
_NOT_CREDENTIALS = ("cookie", "session", "signature", "idempotency")


def _is_credential(name: str) -> bool:
    lowered = name.lower()
    return looks_secret(name) and not any(word in lowered for word in _NOT_CREDENTIALS)


def credentials_of(request: httpx.Request, auth: httpx.Auth | None = None) -> bytes | None:
    """The credentials `request` carries (with `auth` applied, if it is an
    `httpx.BasicAuth`), as canonical bytes; None when it carries none."""
    if isinstance(auth, httpx.BasicAuth):
        request = next(auth.sync_auth_flow(request))  # sets the header; sends nothing
    found: list[tuple[str, str, str]] = [
        ("header", name.lower(), value)
        for name, value in request.headers.multi_items()
        if _is_credential(name)
    ]
    url = request.url
    if url.userinfo:
        found.append(("userinfo", "", url.userinfo.decode("ascii", "replace")))
    found += [
        ("query", name, value) for name, value in url.params.multi_items() if looks_secret(name)
    ]
    if not found:
        return None
    return json.dumps(sorted(found), separators=(",", ":")).encode()


def _digest(credentials: bytes, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", credentials, salt, ITERATIONS, _DIGEST_BYTES)


def target_of(url: str) -> str:
    """A stored URL without its fragment: where the request went."""
    return url.partition("#")[0]


def _mark_of(url: str) -> tuple[bytes, bytes] | None:
    """The (salt, digest) a stored URL carries, or None."""
    fragment = url.partition("#")[2]
    if not fragment.startswith(_MARK):
        return None
    version, _, rest = fragment[len(_MARK) :].partition(".")
    salt, _, digest = rest.partition(".")
    if version != _VERSION:
        return None
    try:
        mark = bytes.fromhex(salt), bytes.fromhex(digest)
    except ValueError:
        return None
    return mark if len(mark[1]) == _DIGEST_BYTES else None


@dataclass(slots=True)
class Sender:
    """This run's credentials: marks the URLs it records, and tells whether a stored
    URL was recorded with the same ones. The credentials stay in memory only."""

    credentials: bytes | None = field(repr=False)
    salt: bytes = field(default_factory=lambda: os.urandom(_SALT_BYTES), repr=False)
    _known: dict[bytes, bytes] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.credentials is not None:  # this run's own digest, made once, up front
            self._under(self.salt)

    def _under(self, salt: bytes) -> bytes:
        assert self.credentials is not None
        digest = self._known.get(salt)
        if digest is None:
            digest = self._known[salt] = _digest(self.credentials, salt)
        return digest

    def mark(self, url: str) -> str:
        """`url` as this run records it: with its digest of the credentials, if any."""
        target = target_of(url)
        if self.credentials is None:
            return target
        digest = self._under(self.salt)
        return f"{target}#{_MARK}{_VERSION}.{self.salt.hex()}.{digest.hex()}"

    def same(self, url: str) -> bool:
        """Whether the stored `url` says it was sent with exactly this run's
        credentials: the same digest, or no digest and no credentials now. Stricter
        than `not other(url)`, which gives the benefit of the doubt."""
        mark = _mark_of(url)
        if mark is None or self.credentials is None:
            return mark is None and self.credentials is None
        salt, digest = mark
        return hmac.compare_digest(self._under(salt), digest)

    def other(self, url: str) -> bool:
        """Whether the stored `url` says it was sent with other credentials than this
        run's. False when either is unknown (no digest, or no credentials now)."""
        mark = _mark_of(url)
        if mark is None or self.credentials is None:
            return False
        salt, digest = mark
        return not hmac.compare_digest(self._under(salt), digest)
