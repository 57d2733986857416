"""Where the client's cost per operation goes, by module and by function, beside plain httpx.

`benchmarks.instructions` counts machine instructions per operation, exactly, but
callgrind attributes a Python program's instructions to the interpreter's loop, not to
the Python functions that ran. This counts what the interpreter ran per operation
instead: the bytecodes executed in each Python function (its own, not its callees'),
by tracing every opcode (`sys.settrace` with `f_trace_opcodes`). A bytecode costs about
a hundred instructions on average (C calls it makes count inside it), so the shares
here say where the instructions go; `benchmarks.instructions` says how many there are.

Each contender posts the same JSON body through `httpx.MockTransport` as
`benchmarks.instructions` does (the same functions run), first a few operations
untraced (imports, caches, the store's schema), then `--ops` traced; the figures are
per operation, minus plain httpx's for the same function (what idemclient adds); the
async contender against plain `httpx.AsyncClient`, counting the event loop's thread
only (the store's calls run in worker threads, which are not traced).

    python -m benchmarks.where_it_goes                        # Client.post, default store
    python -m benchmarks.where_it_goes --contender no-writes  # the flow alone
    python -m benchmarks.where_it_goes --contender async      # AsyncClient.post
    python -m benchmarks.where_it_goes --functions 40         # the 40 costliest functions

Frozen dataclasses' generated ``__init__`` run from ``<string>``: they are counted by
the class they build (``<string>:OperationRecord``...).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from . import instructions

#: name -> (run, the plain httpx run it is compared with)
CONTENDERS: dict[str, tuple[Callable[[int, Path], None], Callable[[int, Path], None]]] = {
    "default": (instructions.idem_default, instructions.plain),
    "no-writes": (instructions.idem_no_writes, instructions.plain),
    "floor": (instructions.floor, instructions.plain),
    # the event loop's thread only: the store's calls run in worker threads, untraced
    "async": (instructions.async_idem, instructions.async_plain),
}

Where = tuple[str, str]


def _where(frame: FrameType) -> Where:
    code = frame.f_code
    if code.co_filename == "<string>":  # a dataclass's generated method
        built = frame.f_locals.get("self")
        return ("<string>", type(built).__qualname__ if built is not None else code.co_name)
    parts = Path(code.co_filename).parts
    return ("/".join(parts[-2:]), code.co_name)


def bytecodes(run: Callable[[int, Path], None], ops: int) -> collections.Counter[Where]:
    """Bytecodes executed per operation by each function (its own), over `ops` operations."""
    with tempfile.TemporaryDirectory() as warm:
        run(20, Path(warm))
    counts: collections.Counter[Where] = collections.Counter()

    def trace(frame: FrameType, event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[_where(frame)] += 1
        return trace

    with tempfile.TemporaryDirectory() as work:
        sys.settrace(trace)
        try:
            run(ops, Path(work))
        finally:
            sys.settrace(None)
    return collections.Counter({where: count / ops for where, count in counts.items()})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contender", choices=sorted(CONTENDERS), default="default")
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--modules", type=int, default=30, help="modules to list")
    parser.add_argument("--functions", type=int, default=0, help="functions to list")
    args = parser.parse_args(argv)
    run, base = CONTENDERS[args.contender]
    plain = bytecodes(base, args.ops)
    this = bytecodes(run, args.ops)
    added = collections.Counter(this)
    added.subtract(plain)
    total_plain, total = sum(plain.values()), sum(this.values())
    print(
        f"bytecodes per operation: plain httpx {total_plain:,.0f}, {args.contender}"
        f" {total:,.0f} ({total / total_plain:.2f}x), added {total - total_plain:,.0f}"
    )
    by_module: collections.Counter[str] = collections.Counter()
    for (module, _name), count in added.items():
        by_module[module] += count
    print(f"\n{'added':>8}  share  module")
    for module, count in by_module.most_common(args.modules):
        print(f"{count:8.0f}  {count / (total - total_plain):5.1%}  {module}")
    if args.functions:
        print(f"\n{'added':>8}  function")
        for (module, name), count in added.most_common(args.functions):
            print(f"{count:8.0f}  {module}:{name}")


if __name__ == "__main__":
    main()
