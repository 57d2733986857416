"""The reference server: the server half of the idempotency protocol, for tests.

A stateful sandbox PSP implementing the seed's protocol: per-client idempotency keys
admitted by `INSERT .. ON CONFLICT DO NOTHING`, a five-step phase machine with a
recovery point, leases with takeover, a recovery worker and a reaper, two simulated
external systems that honour their own keys, and fault injection on every step.
Finished resources queue signed webhook events, delivered at least once with retries,
and with duplicates, reordering and delays on demand.

Use it in-process (`ReferenceServer().transport` in any httpx client, sync or async;
`respx_side_effect` with respx), over a real loopback socket (`serve`, `spawn`, or the
`idemclient server` command), or through the pytest fixtures `reference_server` and
`live_reference_server`. See docs/server.md.

Beside the server: `store_contract`, the suite every store backend passes (imported
on its own: it needs pytest).
"""

from ._adapters.asgi import ReferenceApp
from ._adapters.live import LiveServer, SpawnedServer, serve, spawn
from ._adapters.sandbox import SandboxClient
from ._adapters.transport import ReferenceTransport
from ._machine.clock import ServerClock
from ._machine.external import ExternalMode
from ._machine.faults import Gate
from ._machine.records import (
    KeyRecord,
    LedgerEntry,
    RecoveryReport,
    WebhookEventRecord,
    WebhookReport,
)
from ._machine.webhooks import WebhookFault
from ._protocol.messages import DropConnection, ServerRequest, ServerResponse
from ._protocol.rules import Phase
from ._server import ReferenceServer

__all__ = [
    "DropConnection",
    "ExternalMode",
    "Gate",
    "KeyRecord",
    "LedgerEntry",
    "LiveServer",
    "Phase",
    "RecoveryReport",
    "ReferenceApp",
    "ReferenceServer",
    "ReferenceTransport",
    "SandboxClient",
    "ServerClock",
    "ServerRequest",
    "ServerResponse",
    "SpawnedServer",
    "WebhookEventRecord",
    "WebhookFault",
    "WebhookReport",
    "serve",
    "spawn",
]
