"""Raw HTTP/1.1 over a loopback socket: for bytes that no HTTP client library will send.

Every read is bounded by the socket's timeout, so a server that never answers fails
the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RawAnswer:
    """What came back: a status (None if the connection closed without one)."""

    status: int | None
    head: bytes
    body: bytes

    @property
    def json_body(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def raw_exchange(base_url: str, request: bytes, *, timeout: float = 10.0) -> RawAnswer:
    """Send `request` as is, read until the server closes (send `Connection: close`)."""
    parts = urlsplit(base_url)
    assert parts.hostname == "127.0.0.1", "raw requests go to loopback only"
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as sock:
        # The server may close while we are still writing a request it refused.
        with contextlib.suppress(OSError):
            sock.sendall(request)
        received = bytearray()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    # Interim answers (100 Continue to an Expect header) come before the final one.
    while head.startswith(b"HTTP/1.1 1") and body:
        head, _, body = body.partition(b"\r\n\r\n")
    status = None
    if head.startswith(b"HTTP/1.1 "):
        status = int(head[9:12])
    return RawAnswer(status=status, head=head, body=_dechunk(head, body))


def _dechunk(head: bytes, body: bytes) -> bytes:
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def raw_post(
    base_url: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> RawAnswer:
    """A POST with exactly these header lines (after Host, Content-Length, Connection).

    When the given headers ask for chunked transfer coding, the body is framed that
    way (Content-Length is still sent: the two disagree, as in request smuggling), so
    that the request is always complete and the server always owes an answer.
    """
    # The length and the close first: a given value with a bare LF in it may end the
    # header section early for a lenient parser (RFC 9112 lets a server take a lone LF
    # as a line's end), and whatever it reads as the body then, our length and close
    # are known, so the server owes an answer and ends the connection after it. Given
    # last, a given `Content-Length: 102` before such a value left the server waiting
    # for bytes that never come.
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: psp"]
    lines += [b"Content-Length: " + str(len(body)).encode(), b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    chunked = any(
        name.strip(b" \t").lower() == b"transfer-encoding"
        and value.strip(b" \t").lower() == b"chunked"
        for name, value in headers
    )
    if chunked:
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return raw_exchange(base_url, b"\r\n".join(lines) + b"\r\n\r\n" + body)
