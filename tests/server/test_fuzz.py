"""Whatever arrives, the core answers with a protocol status and never a crash."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemclient.testing import ReferenceServer, ServerRequest, ServerResponse

_keys = st.one_of(
    st.text(max_size=20),
    st.from_regex(r"[A-Za-z0-9\-_.:~]{1,12}", fullmatch=True),
    st.from_regex(r'"[A-Za-z0-9]{1,8}"', fullmatch=True),
)
_bodies = st.one_of(
    st.binary(max_size=80),
    st.builds(
        lambda amount, currency, extra: json.dumps(
            {**extra, "amount": amount, "currency": currency, "reference": "r"}
        ).encode(),
        st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.text(max_size=3)),
        st.text(max_size=4),
        st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    ),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.one_of(st.none(), _keys),
    body=_bodies,
    path=st.sampled_from(["/v1/payments", "/v1/payouts"]),
)
def test_any_post_gets_a_protocol_answer(key: str | None, body: bytes, path: str) -> None:
    with ReferenceServer() as server:
        headers = {"Authorization": "Bearer fuzz"}
        if key is not None:
            headers["Idempotency-Key"] = key
        request = ServerRequest.build("POST", path, headers=headers, body=body)
        first = server.handle(request)
        again = server.handle(request)
        ledger = server.ledger()
    assert isinstance(first, ServerResponse)
    assert isinstance(again, ServerResponse)
    assert first.status in (201, 400, 413)
    if first.status == 201:
        # The same request again is a byte-identical replay.
        assert (again.status, again.body) == (201, first.body)
        assert again.header("idempotent-replayed") == "true"
        [entry] = ledger
        assert (entry.ext1_applied, entry.ext2_applied) == (1, 1)
    else:
        # A rejected request stored nothing: the same answer again, never a replay.
        assert (again.status, again.body) == (first.status, first.body)
        assert again.header("idempotent-replayed") is None
        assert ledger == ()
    content_type = first.header("content-type")
    assert content_type == (
        "application/json" if first.status == 201 else "application/problem+json"
    )
