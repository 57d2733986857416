"""A merchant's webhook receiver as its own process, which can SIGKILL itself.

Run by test_kill.py: ``python receiver_child.py DB SECRET MODE``. It serves the
receiver under the stdlib's wsgiref server on 127.0.0.1 and a free port, prints
``listening on URL`` once, and then, per MODE:

- ``before-commit``: on the first delivery the handler writes its effect and the
  process kills itself before the inbox commits;
- ``after-commit``: the first delivery is committed, and the process kills itself
  before the response leaves;
- ``normal``: it just serves.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from idemclient.inbox import SQLiteInbox, StandardWebhooks, WebhookEvent, WebhookReceiver


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Server(WSGIServer):
    request_queue_size = 128  # a storm of connections at once fits the listen backlog


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def main(db: str, secret: str, mode: str) -> None:
    def handler(event: WebhookEvent, tx: sqlite3.Connection) -> None:
        tx.execute(
            "INSERT INTO effects (message_id, type) VALUES (?, ?)",
            (event.message_id, event.json()["type"]),
        )
        if mode == "before-commit":
            die()  # the effect is written, the id is recorded, nothing is committed

    receiver = WebhookReceiver(
        SQLiteInbox(db), sender="psp", scheme=StandardWebhooks([secret]), handler=handler
    )
    inner = receiver.wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = inner(environ, start_response)
        if mode == "after-commit":
            die()  # committed; the sender never hears so
        return body

    httpd = make_server("127.0.0.1", 0, app, server_class=Server, handler_class=Quiet)
    print(f"listening on http://127.0.0.1:{httpd.server_port}/webhooks", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:4])
