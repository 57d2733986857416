"""`SandboxClient`: the `ReferenceServer` fault and inspection API, over HTTP.

For a server in another thread or process (`idemclient server`, `serve`, `spawn`): the
same method names and record types as `ReferenceServer`, so a test reads the same
whichever side of the socket the server is on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from .._machine.external import ExternalMode
from .._machine.records import (
    KeyRecord,
    LedgerEntry,
    RecoveryReport,
    WebhookEventRecord,
    WebhookReport,
)
from .._machine.webhooks import WebhookFault
from .._protocol.rules import Phase, render_retry_after

__all__ = ["SandboxClient"]


class SandboxClient:
    """Drives a reference server's `/_sandbox/` endpoints at `base_url`."""

    def __init__(
        self, base_url: str, *, client: httpx.Client | None = None, timeout: float = 10.0
    ) -> None:
        self._owned = client is None
        self._http = client if client is not None else httpx.Client(timeout=timeout)
        self._base = base_url.rstrip("/") + "/_sandbox"

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, self._base + path, **kwargs)
        if response.status_code == 404 and path == "/key":
            return None
        response.raise_for_status()
        return response.json()

    def _fault(self, spec: dict[str, Any], times: int, path: str | None, key: str | None) -> None:
        spec["times"] = times
        if path is not None:
            spec["path"] = path
        if key is not None:
            spec["key"] = key
        self._call("POST", "/faults", json=spec)

    # -- fault injection, as on ReferenceServer -----------------------------------------

    def answer(
        self,
        status: int,
        *,
        times: int = 1,
        path: str | None = None,
        key: str | None = None,
        retry_after: float | str | datetime | None = None,
        retry_after_date_in: float | None = None,
        retry_after_ms: int | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> None:
        spec: dict[str, Any] = {"kind": "answer", "status": status}
        if retry_after is not None:
            # A datetime travels already rendered: JSON has no date type.
            spec["retry_after"] = (
                render_retry_after(retry_after)
                if isinstance(retry_after, datetime)
                else retry_after
            )
        if retry_after_date_in is not None:
            spec["retry_after_date_in"] = retry_after_date_in
        if retry_after_ms is not None:
            spec["retry_after_ms"] = retry_after_ms
        if headers is not None:
            spec["headers"] = dict(headers)
        if body is not None:
            spec["body"] = body.decode()
        self._fault(spec, times, path, key)

    def delay(
        self, seconds: float, *, times: int = 1, path: str | None = None, key: str | None = None
    ) -> None:
        self._fault({"kind": "delay", "seconds": seconds}, times, path, key)

    def drop(self, *, times: int = 1, path: str | None = None, key: str | None = None) -> None:
        self._fault({"kind": "drop"}, times, path, key)

    def crash(
        self,
        after: Phase | str,
        *,
        times: int = 1,
        path: str | None = None,
        key: str | None = None,
    ) -> None:
        self._fault({"kind": "crash", "after": Phase(after).value}, times, path, key)

    def external_fault(self, system: int, mode: ExternalMode | str, *, times: int = 1) -> None:
        self._call(
            "POST", f"/external/{system}", json={"mode": ExternalMode(mode).value, "times": times}
        )

    # -- webhooks ------------------------------------------------------------------------

    def set_webhook_endpoint(
        self,
        url: str | None,
        *,
        secrets: Sequence[str] | None = None,
        client: str | None = None,
        scheme: str = "standard-webhooks",
        lifecycle: bool = False,
    ) -> tuple[str, ...]:
        spec: dict[str, Any] = {"url": url, "scheme": scheme, "lifecycle": lifecycle}
        if secrets is not None:
            if isinstance(secrets, str):
                raise TypeError("secrets is a list of secrets, not one secret")
            spec["secrets"] = list(secrets)
        if client is not None:
            spec["client"] = client
        return tuple(self._call("POST", "/webhooks/endpoint", json=spec)["secrets"])

    def deliver_webhooks(self, *, limit: int = 100) -> WebhookReport:
        return WebhookReport.from_json(
            self._call("POST", "/webhooks/deliver", json={"limit": limit})
        )

    def webhook_fault(
        self, mode: WebhookFault | str, *, times: int = 1, seconds: float = 0.0
    ) -> None:
        spec = {"mode": WebhookFault(mode).value, "times": times, "seconds": seconds}
        self._call("POST", "/webhooks/faults", json=spec)

    def webhook_events(self) -> tuple[WebhookEventRecord, ...]:
        data = self._call("GET", "/webhooks/events")["data"]
        return tuple(WebhookEventRecord.from_json(item) for item in data)

    # -- time and maintenance ------------------------------------------------------------

    def now(self) -> float:
        now: float = self._call("GET", "/clock")["now"]
        return now

    def advance(self, seconds: float) -> float:
        now: float = self._call("POST", "/clock", json={"advance": seconds})["now"]
        return now

    def recover(self) -> RecoveryReport:
        return RecoveryReport.from_json(self._call("POST", "/recover"))

    def reap(self) -> int:
        reaped: int = self._call("POST", "/reap")["reaped"]
        return reaped

    def reset(self) -> None:
        self._call("POST", "/reset")

    # -- inspection ----------------------------------------------------------------------

    def ledger(self) -> tuple[LedgerEntry, ...]:
        return tuple(LedgerEntry.from_json(item) for item in self._call("GET", "/ledger")["data"])

    def key_record(self, client: str, key: str) -> KeyRecord | None:
        data = self._call("GET", "/key", params={"client": client, "key": key})
        return None if data is None else KeyRecord.from_json(data)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
