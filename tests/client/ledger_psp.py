"""A stand-in PSP whose effects live in a file, so that they survive a killed client."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import httpx


class FileLedgerPSP:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.touch()

    def effects(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for line in self.path.read_text().splitlines():
            key = json.loads(line)["key"]
            counts[key] = counts.get(key, 0) + 1
        return counts

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":  # the client's time probe: changes nothing
            return httpx.Response(200)
        key = request.headers["idempotency-key"]
        with self.path.open("a+") as ledger:
            fcntl.flock(ledger, fcntl.LOCK_EX)
            ledger.seek(0)
            seen = {json.loads(line)["key"] for line in ledger.read().splitlines()}
            if key not in seen:
                ledger.write(json.dumps({"key": key, "body": request.content.decode()}) + "\n")
                ledger.flush()
        body = {"id": f"pay_{key[:8]}", "key": key}
        headers = {"Idempotent-Replayed": "true"} if key in seen else {}
        return httpx.Response(201, json=body, headers=headers)
