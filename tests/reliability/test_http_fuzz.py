"""Fuzzing the reference server over its real HTTP surface (raw bytes on a socket).

Arbitrary header names and values (control bytes, CR LF injection, colliding names),
arbitrary Idempotency-Key bytes, and JSON bodies with deep nesting, huge numbers and
duplicate names. Whatever arrives, the server answers with a protocol status and
never a 5xx nor silence; it stores a payment only when it answers 201, and then
exactly once; and for keys and JSON the answer is the one the protocol's rules give.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from idemclient.testing import LiveServer, serve

from .conftest import Figures
from .support import PATH, exactly_once
from .wire import RawAnswer, raw_post

TOKEN = (b"Authorization", b"Bearer fuzzer")
_counter = itertools.count()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with serve() as running:
        yield running


def fresh_key() -> str:
    return f"fz-{next(_counter)}"


def body_for(reference: str, extra: str = "") -> bytes:
    return (f'{{"amount": 1250, "currency": "EUR", "reference": "{reference}"{extra}}}').encode()


def stored(live: LiveServer, key: str) -> list[Any]:
    return [e for e in live.server.ledger() if e.idempotency_key == key]


def check_consistent(live: LiveServer, key: str, answer: RawAnswer) -> None:
    """A protocol status; a payment stored exactly when it was created."""
    assert answer.status is not None, "the server closed the connection without answering"
    assert answer.status < 500, answer
    entries = stored(live, key)
    if answer.status == 201:
        [entry] = entries
        assert exactly_once(entry)
    else:
        assert entries == []


# -- arbitrary headers ----------------------------------------------------------------------

_names = st.one_of(
    st.binary(min_size=0, max_size=20),
    st.sampled_from(
        [
            b"Content-Length",
            b"Transfer-Encoding",
            b"Authorization",
            b"Idempotency-Key",
            b"Host",
            b"Expect",
            b"Connection",
        ]
    ),
    st.from_regex(rb"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,20}", fullmatch=True),
)
_values = st.one_of(
    st.binary(max_size=60),
    st.sampled_from(
        [
            b"chunked",
            b"0",
            b"99999999999999999999",
            b"-1",
            b"100-continue",
            b"x\r\nIdempotency-Key: injected",
            b"x\r\n\r\nPOST /v1/payments HTTP/1.1",
            b"Bearer other",
        ]
    ),
)


@FUZZ
@given(headers=st.lists(st.tuples(_names, _values), max_size=4))
@example(headers=[(b"Expect", b"100-continue")])  # an interim 100 before the answer
@example(headers=[(b"Transfer-Encoding", b"chunked")])  # with Content-Length: smuggling
@example(headers=[(b"Content-Length", b"1")])  # two lengths that disagree
# a length, then a lone LF that a lenient parser takes as the header section's end
@example(headers=[(b"Content-Length", b"102"), (b"!", b"\n")])
def test_any_header_bytes_get_a_protocol_answer(
    live: LiveServer, figures: Figures, headers: list[tuple[bytes, bytes]]
) -> None:
    key = fresh_key()
    answer = raw_post(
        live.url,
        PATH,
        [TOKEN, (b"Idempotency-Key", key.encode()), *headers],
        body_for(f"r-{key}"),
    )
    check_consistent(live, key, answer)
    figures.count("HTTP fuzzing", header_examples=1, header_answers_201=answer.status == 201)


# -- arbitrary key bytes ------------------------------------------------------------------------

_FIELD_VALUE_FORBIDDEN = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_KEY = re.compile(r"[A-Za-z0-9\-_.:~]{1,255}")


def expected_key(raw: bytes) -> str | None:
    """The key the protocol reads from these header bytes, or None for a 400."""
    if _FIELD_VALUE_FORBIDDEN.search(raw):
        return None  # no HTTP parser lets these through
    text = raw.decode("latin-1").strip(" \t")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return text if _KEY.fullmatch(text) else None


_key_bytes = st.one_of(
    st.binary(max_size=40),
    st.from_regex(rb'"?[A-Za-z0-9\-_.:~]{1,30}"?', fullmatch=True),
    st.from_regex(rb"[ \t]{0,2}[A-Za-z0-9\-_.:~ ]{0,300}[ \t]{0,2}", fullmatch=True),
)


@FUZZ
@given(raw=_key_bytes)
def test_any_key_bytes_get_the_answer_the_key_rule_gives(
    live: LiveServer, figures: Figures, raw: bytes
) -> None:
    # Each example a tenant of its own, so that keys drawn twice do not meet.
    tenant = f"fuzzer{next(_counter)}"
    answer = raw_post(
        live.url,
        PATH,
        [(b"Authorization", f"Bearer {tenant}".encode()), (b"Idempotency-Key", raw)],
        body_for("r-key"),
    )
    key = expected_key(raw)
    assert answer.status == (400 if key is None else 201), (raw, answer)
    entries = [e for e in live.server.ledger() if e.client == tenant]
    if key is None:
        assert entries == []
    else:
        [entry] = entries
        assert entry.idempotency_key == key
        assert exactly_once(entry)
    figures.count("HTTP fuzzing", key_examples=1, keys_accepted=key is not None)


# -- JSON: nesting, huge numbers, duplicate names --------------------------------------------

_numbers = st.one_of(
    st.integers().map(str),
    st.from_regex(r"-?[1-9][0-9]{0,30}(\.[0-9]{1,10})?[eE][+-]?[0-9]{1,4}", fullmatch=True),
    st.from_regex(r"-?[1-9][0-9]{300,5000}", fullmatch=True),  # beyond 64-bit, beyond floats
    st.sampled_from(["1e400", "-1e400", "1e-400", "5e-324", "1.7976931348623157e308"]),
)
_scalars = st.one_of(
    _numbers,
    st.text(max_size=10).map(json.dumps),
    st.sampled_from(["true", "false", "null", "NaN", "Infinity"]),
)


def _objects(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Names from a small alphabet, so that duplicates in one object are common.
    pairs = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "amount"]), children), max_size=4)
    return pairs.map(lambda ps: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in ps) + "}")


_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ", ".join(items) + "]"),
        _objects(children),
    ),
    max_leaves=20,
)


class _Ambiguous(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    counts = Counter(name for name, _ in pairs)
    if any(count > 1 for count in counts.values()):
        raise _Ambiguous("duplicate name")
    return dict(pairs)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Ambiguous("out of range")
    return value


def _constant(name: str) -> Any:
    raise _Ambiguous(name)


def strict(text: str) -> Any:
    """The oracle: RFC 8259 JSON, with unique names and numbers a float can hold, and
    what every backend stores alike (docs/server.md): no NUL and no lone surrogate in
    any string or name, and at most 32 containers deep."""
    value = json.loads(
        text, object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_constant
    )
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str) and any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in item):
            raise _Ambiguous("not storable text")
        if isinstance(item, dict | list):
            if depth > 32:
                raise _Ambiguous("too deep")
            inner = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((each, depth + 1) for each in inner)
    return value


@FUZZ
@given(extra=_json, depth=st.integers(0, 3), twice=st.booleans())
def test_any_json_gets_the_answer_strict_json_gives(
    live: LiveServer, figures: Figures, extra: str, depth: int, twice: bool
) -> None:
    key = fresh_key()
    nested = "[" * depth + extra + "]" * depth
    body = body_for(f"r-{key}", f', "x": {nested}' + (', "amount": 1250' if twice else ""))
    try:
        expected = strict(body.decode())
    except (ValueError, RecursionError):
        expected = None
    answer = raw_post(live.url, PATH, [TOKEN, (b"Idempotency-Key", key.encode())], body)
    check_consistent(live, key, answer)
    if expected is None:
        assert answer.status == 400, (body[:200], answer)
    else:
        assert answer.status == 201, (body[:200], answer)
        created = strict(answer.body.decode())  # what comes back is strict JSON too
        assert created["x"] == expected["x"]
        replay = raw_post(live.url, PATH, [TOKEN, (b"Idempotency-Key", key.encode())], body)
        assert (replay.status, replay.body) == (201, answer.body)
    figures.count("HTTP fuzzing", json_examples=1, json_answers_201=answer.status == 201)


def test_nesting_deeper_than_any_stack_is_400(live: LiveServer) -> None:
    key = fresh_key()
    deep = "[" * 30_000 + "]" * 30_000
    answer = raw_post(
        live.url, PATH, [TOKEN, (b"Idempotency-Key", key.encode())], body_for("r", f', "x": {deep}')
    )
    assert answer.status == 400
    assert stored(live, key) == []
