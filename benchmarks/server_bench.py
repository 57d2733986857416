"""The reference server under load from wrk (a second process, in C): new-key POSTs and
replays per second, against a no-op endpoint on the same stack; on a SQLite file, and
on the run's PostgreSQL when there is one."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from idemclient.testing import spawn

_SCRIPT = """
local counter = 0
local mode = "%(mode)s"
local thread_id = 0
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
function init(args)
  thread_id = id
end
request = function()
  local key = "replay-key"
  local path = "/v1/payments"
  if mode == "new" then
    counter = counter + 1
    key = string.format("k-%%d-%%d", thread_id, counter)
  elseif mode == "noop" then
    path = "/_sandbox/noop"
  end
  return wrk.format("POST", path, {
    ["Authorization"] = "Bearer bench-load",
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }, '{"amount": 1250, "currency": "EUR", "reference": "bench"}')
end
"""


def wrk_rate(url: str, mode: str, seconds: int, work: Path) -> float:
    script = work / f"{mode}.lua"
    script.write_text(_SCRIPT % {"mode": mode})
    done = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", done.stdout)
    if match is None or non2xx is not None:
        raise RuntimeError(f"wrk run failed or got errors:\n{done.stdout}\n{done.stderr}")
    return float(match.group(1))


def _rates(db: Path | str, seconds: int, work: Path) -> dict[str, float]:
    with spawn(db=db, recovery_interval=0) as server:
        httpx.post(
            f"{server.url}/v1/payments",
            json={"amount": 1250, "currency": "EUR", "reference": "bench"},
            headers={"Authorization": "Bearer bench-load", "Idempotency-Key": "replay-key"},
        ).raise_for_status()
        return {
            mode: wrk_rate(server.url, mode, seconds, work) for mode in ("noop", "new", "replay")
        }


def run(work: Path, seconds: int, pg_url: str | None = None) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise RuntimeError("the server benchmark needs wrk: apt-get install wrk (make bench does)")
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, Any] = {}
    backends: list[tuple[str, Path | str]] = [("", work / "load.sqlite3")]
    if pg_url is not None:
        backends.append((" [postgres]", pg_url))
    for suffix, db in backends:
        rates = _rates(db, seconds, work)
        noop = rates["noop"]  # the same stack without storage, per server process
        rows[f"no-op endpoint{suffix}"] = {"req_per_s": noop, "vs_noop": 1.0}
        for label, mode in (("new-key POST", "new"), ("replayed POST", "replay")):
            rows[f"{label}{suffix}"] = {"req_per_s": rates[mode], "vs_noop": rates[mode] / noop}
    return rows
