"""What every storage backend keeps alike: the text and the shapes a request may carry.

The server stores what a request says (its body, its reference, its path) in SQLite or
in PostgreSQL, and must answer the same on both. SQLite keeps any Python string;
PostgreSQL's `text` refuses NUL (U+0000); neither driver can encode a lone surrogate
(U+D800 to U+DFFF, which JSON can spell as `"\\ud800"`) as UTF-8. A value taken by
one backend and refused by the other fails after admission on that one: the key stays
started for good, every retry a 409, nothing applied. So the server holds every request
to what both keep, and says so before anything is stored:

- no NUL and no lone surrogate in any string of the body (field names included), in the
  path, or in the query;
- JSON nested at most `MAX_DEPTH` containers deep. Python's JSON parser and encoder
  recurse, and how deep they can go depends on the stack of whoever runs them: a body
  read at the edge could fail when the recovery worker, a look-up or a replay reads it
  again from deeper down.

Pure: values in, a finding (where, what) out; `rules` turns a finding into its 400.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

__all__ = ["MAX_DEPTH", "unstorable_in_body", "unstorable_in_target", "unstorable_text"]

#: How many containers (objects and arrays) a body may nest, itself included.
MAX_DEPTH = 32

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,39}")


def unstorable_text(text: str) -> str | None:
    """What in `text` no backend stores alike (a NUL, a lone surrogate), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "a NUL character (U+0000), which is not accepted in text"
    return f"a lone surrogate (U+{ord(char):04X}), which is not text"


def _member(path: str, name: str) -> str:
    """`path` and one more field name, readable: `metadata.note`, `a["odd name"]`."""
    if _PLAIN_NAME.fullmatch(name):
        return f"{path}.{name}" if path else name
    # Quoted as JSON with every non-ASCII character escaped: a NUL or a surrogate in a
    # name is shown, never sent raw (an answer must be encodable itself).
    return f"{path}[{json.dumps(name[:40])}]"


def _may_hold_findings(raw: bytes) -> bool:
    """Whether the raw body can hold anything `unstorable_in_body` looks for.

    In valid UTF-8 JSON a NUL or a surrogate can only be written as a `\\u` escape (a raw
    control character in a string is not JSON, a surrogate is not UTF-8), and nesting
    deeper than `MAX_DEPTH` needs more brackets than that. Most bodies have neither,
    and are not walked.
    """
    return b"\\u" in raw or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH


def unstorable_in_body(value: Any, raw: bytes) -> tuple[str, str] | None:
    """(field, what is wrong with it) for the first thing in the parsed body `value` that no backend
    stores alike or that nests too deep; None when there is none. `raw` is the body as
    received: most bodies are cleared by looking at it, without a walk."""
    if not _may_hold_findings(raw):
        return None
    # Depth-first, without recursion (a hostile body must not exhaust the stack), in
    # document order, so the field named is the first one a reader finds.
    pending: list[tuple[Any, str, int]] = [(value, "", 1)]
    while pending:
        item, path, depth = pending.pop()
        if isinstance(item, str):
            what = unstorable_text(item)
            if what is not None:
                return path or "the body", f"holds {what}"
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            return path or "the body", f"nests deeper than {MAX_DEPTH} levels"
        children = []
        if isinstance(item, dict):
            for name, inner in item.items():
                where = _member(path, name)
                what = unstorable_text(name)
                if what is not None:
                    return where, f"has a name that holds {what}"
                children.append((inner, where, depth + 1))
        else:
            children = [(inner, f"{path}[{n}]", depth + 1) for n, inner in enumerate(item)]
        pending.extend(reversed(children))
    return None


def unstorable_in_target(path: str, query: str) -> tuple[str, str] | None:
    """("path" or "query", what) when the request's path or query (percent-decoded)
    holds what no backend stores alike, or None."""
    what = unstorable_text(path)
    if what is not None:
        return "path", what
    what = unstorable_text(unquote(query)) if "%" in query or "\x00" in query else None
    return None if what is None else ("query", what)
