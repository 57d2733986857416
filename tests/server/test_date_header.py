"""The reference server sends its time: one `Date` on every answer, from its own clock
(RFC 9110 section 6.6.1), so that a client reading it sees the clock a test moved. A
`HEAD` (a client asking only that) does nothing and takes no scripted fault. Over a
socket: tests/integration/test_server_clock.py."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

from idemclient import ManualClock
from idemclient.testing import ReferenceServer, ServerRequest, ServerResponse

AUTH = {"authorization": "Bearer shop-1"}
PAYMENT = b'{"amount": 700, "currency": "EUR", "reference": "inv-1"}'


def _dates(answer: object) -> list[float]:
    assert isinstance(answer, ServerResponse)
    return [
        parsedate_to_datetime(value).timestamp()
        for name, value in answer.headers
        if name.lower() == "date"
    ]


def test_every_answer_carries_one_date_from_the_server_s_clock() -> None:
    clock = ManualClock(start=1_800_000_000.7)
    with ReferenceServer(clock=clock) as server:
        created = server.handle(
            ServerRequest.build(
                "POST", "/v1/payments", headers={**AUTH, "idempotency-key": "k-1"}, body=PAYMENT
            )
        )
        assert _dates(created) == [1_800_000_000.0]  # whole seconds, never ahead
        clock.advance(3600)
        assert _dates(server.handle(ServerRequest.build("GET", "/nowhere"))) == [1_800_003_600.0]
        assert _dates(server.handle(ServerRequest.build("GET", "/_sandbox/ledger"))) == [
            1_800_003_600.0
        ]
        server.answer(503)
        refused = server.handle(
            ServerRequest.build(
                "POST", "/v1/payments", headers={**AUTH, "idempotency-key": "k-2"}, body=PAYMENT
            )
        )
        assert isinstance(refused, ServerResponse)
        assert refused.status == 503
        assert _dates(refused) == [1_800_003_600.0]


def test_a_head_takes_no_scripted_fault_and_does_nothing() -> None:
    with ReferenceServer(clock=ManualClock()) as server:
        server.answer(503)
        server.drop()
        probe = server.handle(ServerRequest.build("HEAD", "/v1/payments", headers=AUTH))
        assert isinstance(probe, ServerResponse)
        assert _dates(probe)
        assert server.pending_faults() == 2  # left for the requests that do something
        assert server.ledger() == ()
