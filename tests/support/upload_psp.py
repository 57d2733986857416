"""A stand-in PSP for the bodies the reference server does not take (file uploads,
forms): each new idempotency key is applied once, a key seen before gets the stored
answer again, marked as a replay; it can break the connection right after applying, as
a server that crashed after its commit. Its ledger is a file, so that two processes (an
earlier version of the client and this one) share one server.

It imports nothing of idemclient or of the tests: an earlier version's process imports
it from this folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from pathlib import Path

import httpx

__all__ = ["FileUploadPSP"]


class FileUploadPSP:
    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.ledger = folder / "ledger.jsonl"
        self.drops = folder / "drops"
        self.requests = folder / "requests"
        for path in (self.ledger, self.drops, self.requests):
            path.touch()

    def drop_next(self, times: int = 1) -> None:
        """The next `times` requests are applied, then their connection is broken."""
        self.drops.write_text(str(times))

    def effects(self) -> list[dict[str, str]]:
        """Every upload applied: one entry per new key."""
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]

    def sent(self) -> int:
        """How many requests with a key reached the server."""
        return len(self.requests.read_text())

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # a client's time probe: changes nothing
            return httpx.Response(200)
        key = request.headers.get("idempotency-key")
        if key is None:
            return httpx.Response(400, json={"error": "an Idempotency-Key header is required"})
        body = request.read()
        with self.ledger.open("a+") as ledger:
            fcntl.flock(ledger, fcntl.LOCK_EX)
            with self.requests.open("a") as requests:
                requests.write(".")
            ledger.seek(0)
            seen = [json.loads(line) for line in ledger.read().splitlines()]
            found = next((entry for entry in seen if entry["key"] == key), None)
            if found is None:
                found = {
                    "key": key,
                    "id": f"file_{len(seen) + 1}",
                    "content_type": request.headers.get("content-type", ""),
                    "sha256": hashlib.sha256(body).hexdigest(),
                }
                ledger.write(json.dumps(found) + "\n")
                ledger.flush()
            drops = int(self.drops.read_text() or 0)
            if drops > 0:
                self.drops.write_text(str(drops - 1))
                raise httpx.ReadError("the connection broke after it was applied", request=request)
        replay = {"Idempotent-Replayed": "true"} if found["key"] in {e["key"] for e in seen} else {}
        return httpx.Response(201, json={"id": found["id"], "object": "file"}, headers=replay)
