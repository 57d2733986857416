"""An answer's evidence: its status and reason phrase, the server's own words where it
sent some (HTTP/1.1), else the status's standard phrase."""

from __future__ import annotations

import httpx

from idemclient._evidence import answer_evidence


def test_the_standard_phrase_where_the_transport_gave_none() -> None:
    assert answer_evidence(httpx.Response(503)) == "HTTP 503 Service Unavailable"
    assert answer_evidence(httpx.Response(503)) == "HTTP 503 Service Unavailable"  # kept
    assert answer_evidence(httpx.Response(299)) == "HTTP 299"  # no phrase, no trailing space


def test_the_servers_own_words_where_it_sent_them() -> None:
    own = httpx.Response(503, extensions={"reason_phrase": b"Slow Down"})
    assert answer_evidence(own) == "HTTP 503 Slow Down"
    # ...and they do not become the status's words for answers without their own.
    assert answer_evidence(httpx.Response(503)) == "HTTP 503 Service Unavailable"
    assert answer_evidence(httpx.Response(200, extensions={"reason_phrase": b""})) == "HTTP 200"
