"""The client's own cost per operation, in instructions (callgrind), beside plain httpx.

Wall time on a shared machine moves with whatever else runs; the number of
instructions a process executes does not. Each contender posts the same JSON body
through `httpx.MockTransport` (200, ``{}``), `--ops` times, in a fresh interpreter
under ``valgrind --tool=callgrind``; it runs twice with two operation counts, and the
difference of the totals over the difference of the counts is the cost of one
operation, with start-up and imports cancelled out.

    python -m benchmarks.instructions                 # every contender (several minutes)
    python -m benchmarks.instructions --only idemclient,httpx
    python -m benchmarks.instructions --one idemclient --ops 300   # one run, no valgrind

Contenders: the peers as their users write them (`benchmarks.contenders`' shapes),
`floor` (`benchmarks.floor`: a key committed before the send and one update after,
nothing else), idemclient's `Client.post` with its default store (a SQLite file,
intent durability), on a store that executes nothing (`no-writes`: the flow alone),
and the async pair. Ratios are against plain httpx of the same kind (sync or async).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

URL = "http://bench.invalid"
PATH = "/_sandbox/noop"
BODY = {"amount": 1250, "currency": "EUR", "reference": "bench"}
HEADERS = {"Authorization": "Bearer bench-merchant"}

Run = Callable[[int, Path], None]


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={})


def _key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


def _http() -> httpx.Client:
    return httpx.Client(base_url=URL, headers=HEADERS, transport=httpx.MockTransport(_answer))


def plain(ops: int, _dir: Path) -> None:
    with _http() as http:
        for _ in range(ops):
            assert http.post(PATH, json=BODY, headers=_key()).status_code == 200


def httpx_retries(ops: int, _dir: Path) -> None:
    from httpx_retries import Retry, RetryTransport

    retry = Retry(total=8, allowed_methods=["POST"], backoff_factor=0.25)
    transport = RetryTransport(transport=httpx.MockTransport(_answer), retry=retry)
    with httpx.Client(base_url=URL, headers=HEADERS, transport=transport) as http:
        for _ in range(ops):
            assert http.post(PATH, json=BODY, headers=_key()).status_code == 200


def tenacity_httpx(ops: int, _dir: Path) -> None:
    import tenacity

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(8),
        wait=tenacity.wait_random_exponential(multiplier=0.25, max=20),
        retry=tenacity.retry_if_exception_type(httpx.TransportError),
        reraise=True,
    )
    with _http() as http:
        for _ in range(ops):
            headers = _key()
            for attempt in retrying:
                with attempt:
                    assert http.post(PATH, json=BODY, headers=headers).status_code == 200


def stamina_httpx(ops: int, _dir: Path) -> None:
    import stamina

    with _http() as http:
        for _ in range(ops):
            headers = _key()
            for attempt in stamina.retry_context(on=httpx.TransportError, attempts=8):
                with attempt:
                    assert http.post(PATH, json=BODY, headers=headers).status_code == 200


def floor(ops: int, workdir: Path) -> None:
    from .floor import DurableKeyClient

    with _http() as http:
        client = DurableKeyClient(str(workdir / "floor.db"), http)
        for _ in range(ops):
            assert client.post(PATH, json_body=BODY).status_code == 200
        client.close()


def _idem(store: Any, ops: int) -> None:
    import idemclient

    with idemclient.Client(
        base_url=URL, headers=HEADERS, transport=httpx.MockTransport(_answer), store=store
    ) as client:
        for _ in range(ops):
            assert client.post(PATH, json=BODY).status_code == 200


def idem_default(ops: int, workdir: Path) -> None:
    _idem(workdir / "idem.db", ops)


def idem_no_writes(ops: int, _dir: Path) -> None:
    from .client_cpu import NoWritesStore

    _idem(NoWritesStore(), ops)


def async_plain(ops: int, _dir: Path) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(
            base_url=URL, headers=HEADERS, transport=httpx.MockTransport(_answer)
        ) as http:
            for _ in range(ops):
                response = await http.post(PATH, json=BODY, headers=_key())
                assert response.status_code == 200

    asyncio.run(main())


def async_idem(ops: int, workdir: Path) -> None:
    import idemclient

    async def main() -> None:
        async with idemclient.AsyncClient(
            base_url=URL,
            headers=HEADERS,
            transport=httpx.MockTransport(_answer),
            store=workdir / "aidem.db",
        ) as client:
            for _ in range(ops):
                assert (await client.post(PATH, json=BODY)).status_code == 200

    asyncio.run(main())


#: name -> (run, the plain httpx contender it is compared with)
CONTENDERS: dict[str, tuple[Run, str]] = {
    "httpx": (plain, "httpx"),
    "httpx-retries": (httpx_retries, "httpx"),
    "tenacity+httpx": (tenacity_httpx, "httpx"),
    "stamina+httpx": (stamina_httpx, "httpx"),
    "floor": (floor, "httpx"),
    "idemclient[no-writes]": (idem_no_writes, "httpx"),
    "idemclient": (idem_default, "httpx"),
    "httpx-async": (async_plain, "httpx-async"),
    "idemclient-async": (async_idem, "httpx-async"),
}

_COLLECTED = re.compile(rb"Collected : (\d+)")


def count(name: str, ops: int) -> int:
    """Instructions one fresh interpreter executes running `name` for `ops` operations."""
    with tempfile.TemporaryDirectory() as workdir:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                "-m",
                "benchmarks.instructions",
                "--one",
                name,
                "--ops",
                str(ops),
                "--workdir",
                workdir,
            ],
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=False,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{name}: callgrind run failed:\n{done.stderr.decode()[-2000:]}")
    return int(found.group(1))


def run(names: list[str], low: int = 100, high: int = 400) -> dict[str, dict[str, float]]:
    """Instructions per operation of each contender, and the ratio to its plain httpx."""
    per_op = {}
    for name in names:
        per_op[name] = (count(name, high) - count(name, low)) / (high - low)
        print(f"  {name}: {per_op[name] / 1000:,.0f} k instructions/op", file=sys.stderr)
    rows = {}
    for name, value in per_op.items():
        base = CONTENDERS[name][1]
        ratio = value / per_op[base] if base in per_op else float("nan")
        rows[name] = {"instructions": value, "vs_plain": ratio}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one", choices=sorted(CONTENDERS))
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--workdir")
    parser.add_argument("--only", help="comma-separated contenders (their plain httpx added)")
    parser.add_argument("--low", type=int, default=100)
    parser.add_argument("--high", type=int, default=400)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.one is not None:
        with tempfile.TemporaryDirectory() as scratch:
            CONTENDERS[args.one][0](args.ops, Path(args.workdir or scratch))
        return 0
    names = list(CONTENDERS)
    if args.only:
        wanted = set(args.only.split(","))
        wanted |= {CONTENDERS[name][1] for name in wanted}
        names = [name for name in CONTENDERS if name in wanted]
    rows = run(names, args.low, args.high)
    print(f"{'contender':24} {'instructions/op':>16} {'vs plain httpx':>15}")
    for name, row in rows.items():
        print(f"{name:24} {row['instructions'] / 1000:>14,.0f} k {row['vs_plain']:>15.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
