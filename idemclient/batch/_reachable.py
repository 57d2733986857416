"""The start-up check of `batch submit`: can the server be reached at all, and if not,
is running again later the fix, or is it the URL?

Before a batch starts, one GET of the server's root. No answer because nothing listens
or the network is down is worth running again later (exit 3). A TLS failure is not: an
`https://` URL to a server that speaks plain HTTP fails the handshake with "wrong
version number" every time, and so does a certificate this host does not trust; a
rerun would fail the same way, so it is bad input (exit 2), said with what to check.
"""

from __future__ import annotations

import ssl

import httpx

from ._report import ExitCode

__all__ = ["unreachable"]

#: OpenSSL's reasons for a peer that does not speak TLS (plain HTTP on the port).
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE"})


def unreachable(error: httpx.TransportError, url: str) -> tuple[str, ExitCode]:
    """What to say of a start-up check that got no answer, and the exit code."""
    tls = _tls_error(error)
    if isinstance(tls, ssl.SSLCertVerificationError):
        return (
            f"cannot reach {url}: its TLS certificate is not trusted here"
            f" ({tls.verify_message or tls.reason}). Check the host name in --url, or"
            " this host's trusted certificates (SSL_CERT_FILE). Nothing was sent",
            ExitCode.BAD_INPUT,
        )
    if tls is not None and tls.reason in _NOT_TLS and httpx.URL(url).scheme == "https":
        plain = url.replace("https://", "http://", 1)
        return (
            f"cannot reach {url}: the server does not speak TLS there ({tls.reason}): it"
            f" may be a plain HTTP server (a local or test one): if so, give --url {plain}."
            " Nothing was sent",
            ExitCode.BAD_INPUT,
        )
    return (
        f"cannot reach {url}: {type(error).__name__}: {error}. Nothing was sent; run the"
        " same command again once it is reachable.",
        ExitCode.RUN_AGAIN,
    )


def _tls_error(error: BaseException) -> ssl.SSLError | None:
    """The TLS error under `error` (httpx wraps httpcore's, which wraps ssl's)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
