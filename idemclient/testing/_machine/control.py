"""The `/_sandbox/` control endpoints: the fault and inspection API over HTTP.

They take no authentication: they are test controls for a server bound to loopback,
and a test driving a live server must be able to reach them without a tenant token.
A server that must not expose them is built with `sandbox=False` (`--no-sandbox`).

    POST /_sandbox/noop                     200 {}: same stack, no work (benchmarks)
    POST /_sandbox/faults                   script answer | delay | drop | crash
    POST /_sandbox/external/{1,2}           {"mode": ..., "times": n}
    GET  /_sandbox/clock                    {"now": t}
    POST /_sandbox/clock                    {"advance": seconds} -> {"now": t}
    POST /_sandbox/recover                  run the recovery worker once
    POST /_sandbox/reap                     run the reaper once -> {"reaped": n}
    POST /_sandbox/reset                    forget everything
    GET  /_sandbox/ledger                   {"data": [ledger entries]}
    GET  /_sandbox/key?client=C&key=K       the key row, or 404
    POST /_sandbox/webhooks/endpoint        {"url", "secrets"?, "client"?} -> {"secrets": [...]}
    POST /_sandbox/webhooks/deliver         run the delivery loop once -> a WebhookReport
    POST /_sandbox/webhooks/faults          {"mode", "times"?, "seconds"?}
    GET  /_sandbox/webhooks/events          {"data": [webhook event records]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from .._protocol.messages import ServerRequest, ServerResponse, json_bytes
from .._protocol.rules import JSON_CONTENT_TYPE, Phase, Problem
from .._storage.rows import StorageDown
from .core import storage_down
from .external import ExternalMode
from .records import KeyRecord, LedgerEntry, RecoveryReport, WebhookEventRecord, WebhookReport
from .webhooks import STANDARD_WEBHOOKS, WebhookFault

__all__ = ["Controlled", "handle_control"]


class Controlled(Protocol):
    """The server the endpoints drive: the part of `ReferenceServer`'s fault and
    inspection API they reach (the server puts them behind its `handle`, so they name
    what they use of it rather than the server itself)."""

    @property
    def sandbox(self) -> bool: ...

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
    ) -> None: ...

    def delay(
        self, seconds: float, *, times: int = 1, path: str | None = None, key: str | None = None
    ) -> None: ...

    def drop(self, *, times: int = 1, path: str | None = None, key: str | None = None) -> None: ...

    def crash(
        self, after: Phase | str, *, times: int = 1, path: str | None = None, key: str | None = None
    ) -> None: ...

    def external_fault(self, system: int, mode: ExternalMode | str, *, times: int = 1) -> None: ...

    def pending_faults(self) -> int: ...

    def now(self) -> float: ...

    def advance(self, seconds: float) -> float: ...

    def recover(self) -> RecoveryReport: ...

    def reap(self) -> int: ...

    def reset(self) -> None: ...

    def ledger(self) -> tuple[LedgerEntry, ...]: ...

    def set_webhook_endpoint(
        self,
        url: str | None,
        *,
        secrets: Sequence[str] | None = None,
        client: str | None = None,
        scheme: str = STANDARD_WEBHOOKS,
        lifecycle: bool = False,
    ) -> tuple[str, ...]: ...

    def deliver_webhooks(self, *, limit: int = 100) -> WebhookReport: ...

    def webhook_fault(
        self, mode: WebhookFault | str, *, times: int = 1, seconds: float = 0.0
    ) -> None: ...

    def webhook_events(self) -> tuple[WebhookEventRecord, ...]: ...

    def key_record(self, client: str, key: str) -> KeyRecord | None: ...


_FAULT_MATCH = ("times", "path", "key")


def _ok(value: Any, status: int = 200) -> ServerResponse:
    return ServerResponse(status, (("content-type", JSON_CONTENT_TYPE),), json_bytes(value))


def _bad(detail: str) -> Problem:
    return Problem(400, "invalid-sandbox-request", "Invalid sandbox request", detail)


def _object(request: ServerRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        value = json.loads(request.body)
    except ValueError:
        raise _bad("the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise _bad("the body must be a JSON object")
    return value


_FAULT_FIELDS = {
    "answer": {"status", "retry_after", "retry_after_date_in", "retry_after_ms", "headers", "body"},
    "delay": {"seconds"},
    "drop": set(),
    "crash": {"after"},
}


def _add_fault(server: Controlled, spec: dict[str, Any]) -> None:
    kind = spec.pop("kind", None)
    if kind not in _FAULT_FIELDS:
        raise _bad('"kind" must be one of: answer, delay, drop, crash')
    # Reject before scripting anything: a typo must not leave half a script behind.
    unknown = sorted(set(spec) - _FAULT_FIELDS[kind] - set(_FAULT_MATCH))
    if unknown:
        raise _bad(f"unknown fields for {kind}: {', '.join(unknown)}")
    match = {name: spec[name] for name in _FAULT_MATCH if name in spec}
    if kind == "answer":
        headers = spec.get("headers")
        body = spec.get("body")
        server.answer(
            int(spec["status"]),
            retry_after=spec.get("retry_after"),
            retry_after_date_in=spec.get("retry_after_date_in"),
            retry_after_ms=spec.get("retry_after_ms"),
            headers=None if headers is None else {str(k): str(v) for k, v in headers.items()},
            body=None if body is None else str(body).encode(),
            **match,
        )
    elif kind == "delay":
        server.delay(float(spec["seconds"]), **match)
    elif kind == "drop":
        server.drop(**match)
    else:
        server.crash(str(spec["after"]), **match)


def handle_control(server: Controlled, request: ServerRequest) -> ServerResponse:
    """Answer one `/_sandbox/` request."""
    if not server.sandbox:
        return Problem(404, "no-such-route", "Not found", "the sandbox is disabled").response()
    try:
        return _route(server, request)
    except Problem as problem:
        return problem.response()
    except StorageDown as down:
        return storage_down(request, down)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return _bad(f"{type(exc).__name__}: {exc}").response()


def _route(server: Controlled, request: ServerRequest) -> ServerResponse:
    method, path = request.method, request.path.removeprefix("/_sandbox")
    if (method, path) == ("POST", "/noop"):
        return _ok({})
    if (method, path) == ("POST", "/faults"):
        _add_fault(server, _object(request))
        return _ok({"pending": server.pending_faults()}, 201)
    if method == "POST" and path in ("/external/1", "/external/2"):
        spec = _object(request)
        server.external_fault(int(path[-1]), str(spec["mode"]), times=int(spec.get("times", 1)))
        return _ok({}, 201)
    if (method, path) == ("GET", "/clock"):
        return _ok({"now": server.now()})
    if (method, path) == ("POST", "/clock"):
        return _ok({"now": server.advance(float(_object(request)["advance"]))})
    if (method, path) == ("POST", "/recover"):
        return _ok(server.recover().to_json())
    if (method, path) == ("POST", "/reap"):
        return _ok({"reaped": server.reap()})
    if (method, path) == ("POST", "/reset"):
        server.reset()
        return _ok({})
    if (method, path) == ("GET", "/ledger"):
        return _ok({"data": [entry.to_json() for entry in server.ledger()]})
    if (method, path) == ("POST", "/webhooks/endpoint"):
        spec = _object(request)
        unknown = sorted(set(spec) - {"url", "secrets", "client", "scheme", "lifecycle"})
        if unknown:
            raise _bad(f"unknown fields: {', '.join(unknown)}")
        given = spec.get("secrets")
        if given is not None and not (
            isinstance(given, list) and all(isinstance(x, str) for x in given)
        ):
            raise _bad('"secrets" is a list of strings')
        url = spec.get("url")
        chosen = server.set_webhook_endpoint(
            None if url is None else str(url),
            secrets=given,
            client=None if spec.get("client") is None else str(spec["client"]),
            scheme=str(spec.get("scheme", STANDARD_WEBHOOKS)),
            lifecycle=spec.get("lifecycle", False) is True,
        )
        return _ok({"secrets": list(chosen)}, 201)
    if (method, path) == ("POST", "/webhooks/deliver"):
        limit = int(_object(request).get("limit", 100))
        return _ok(server.deliver_webhooks(limit=limit).to_json())
    if (method, path) == ("POST", "/webhooks/faults"):
        spec = _object(request)
        unknown = sorted(set(spec) - {"mode", "times", "seconds"})
        if unknown:
            raise _bad(f"unknown fields: {', '.join(unknown)}")
        server.webhook_fault(
            str(spec["mode"]),
            times=int(spec.get("times", 1)),
            seconds=float(spec.get("seconds", 0.0)),
        )
        return _ok({"pending": server.pending_faults()}, 201)
    if (method, path) == ("GET", "/webhooks/events"):
        return _ok({"data": [event.to_json() for event in server.webhook_events()]})
    if (method, path) == ("GET", "/key"):
        params = request.query_params()
        record = server.key_record(params["client"], params["key"])
        if record is None:
            raise Problem(404, "not-found", "Not found", "no such key row")
        return _ok(record.to_json())
    raise Problem(404, "no-such-route", "Not found", f"no sandbox control at {request.path}")
