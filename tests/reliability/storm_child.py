"""One of the OS processes of the storm: N threads issue the same operation at once.

    python storm_child.py URL STORE OPERATION_ID THREADS

Prints "ready" once its threads are lined up and about to call, then one JSON line per
caller: the key, state, whether the answer came from the local store, the sha256 of
the final response body, and the attempts this process made (from the hooks).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))

from support import PATH, payment

from idemclient import Client
from idemclient.hooks import AttemptEvent, Hooks


def main(url: str, store: str, operation_id: str, threads: int) -> None:
    attempts: list[str] = []
    lock = threading.Lock()

    def on_attempt(event: AttemptEvent) -> None:
        with lock:
            attempts.append(event.key)

    barrier = threading.Barrier(threads + 1)
    with Client(
        store=store,
        base_url=url,
        headers={"Authorization": "Bearer storm-merchant"},
        hooks=Hooks(on_attempt=on_attempt),
    ) as client:

        def call() -> dict[str, object]:
            barrier.wait(timeout=30)
            outcome = client.post(PATH, json=payment("storm-1"), operation_id=operation_id)
            assert outcome.response is not None
            return {
                "key": outcome.key,
                "state": outcome.state.value,
                "from_store": outcome.from_store,
                "replayed": outcome.replayed,
                "body": hashlib.sha256(outcome.response.content).hexdigest(),
            }

        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = [pool.submit(call) for _ in range(threads)]
            barrier.wait(timeout=30)
            print("ready", flush=True)
            results = [future.result(timeout=120) for future in futures]
    for result in results:
        print(json.dumps(result), flush=True)
    print(json.dumps({"attempts": attempts}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
