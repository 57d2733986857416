"""OpenTelemetry for idemclient: spans and metrics from the client's hooks.

Install the extra (`pip install 'idemclient[otel]'`), configure OpenTelemetry as your
application does, and give the hooks to the client::

    from idemclient import Client
    from idemclient.otel import otel_hooks

    client = Client(base_url="https://psp.example", store="payments.db", hooks=otel_hooks())

This module imports without OpenTelemetry installed; `otel_hooks()` then raises an
`ImportError` that names the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .hooks import Hooks

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["otel_hooks"]


def otel_hooks(
    hooks: Hooks | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    record_key: bool = True,
) -> Hooks:
    """Hooks that make OpenTelemetry spans and metrics of every operation, for a client
    (`Client(hooks=...)`, `AsyncClient`, `wrap`, or a transport's settings).

    - Each call of an operation is a span named `idemclient <METHOD>`, with a child span
      (kind CLIENT, named `<METHOD>`) per attempt: method, host, URL (credentials
      redacted), attempt number, status, classification, the wait before the next
      attempt, and the outcome's state. Retries and the outcome are events on the
      operation's span. Span names never hold a path.
    - Metrics: `idemclient.attempts`, `idemclient.retries` (by the classification of
      the attempt retried, `idemclient.reason`), `idemclient.outcomes` (by
      `idemclient.state`), `idemclient.operations.indeterminate` (an up-down counter:
      operations this process saw end indeterminate and has not seen settled), and
      `idemclient.store.duration` (a histogram of store calls, in seconds). Their
      attributes are the method, the host, the classification, the state, the store
      call: never a key, an operation id or a path.

    `hooks`: your own hooks, called after these. `tracer_provider` and `meter_provider`:
    the providers to use, else OpenTelemetry's global ones (nothing is recorded until
    your application configures them). `record_key=False` leaves the idempotency key
    out of the spans.

    A failure of the telemetry never fails a call: it is logged once on the
    `idemclient.otel` logger.
    """
    try:
        from ._otel import telemetry_hooks
    except ImportError as exc:
        raise ImportError(
            f"idemclient.otel needs OpenTelemetry: pip install 'idemclient[otel]' ({exc})"
        ) from exc
    return telemetry_hooks(
        hooks,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        record_key=record_key,
    )
