"""A request's headers read once (`_frame.read_headers`) are what httpx reads: the
names lowercased, the values decoded as httpx decodes them, repeats kept in order."""

from __future__ import annotations

import httpx
import pytest

from idemclient._frame import read_headers, values_of

GIVEN = {
    "ascii": [("Content-Type", "application/json"), ("Idempotency-Key", "k-1")],
    "repeated": [("Content-Type", "text/plain"), ("X-A", "1"), ("content-type", "a/b")],
    "utf-8": [("X-Note", "café".encode()), ("Accept", b"*/*")],
    "latin-1": [("X-Note", "café".encode("latin-1")), ("Accept", b"*/*")],
    "none": [],
}


@pytest.mark.parametrize("headers", GIVEN.values(), ids=GIVEN.keys())
def test_the_headers_read_once_are_httpx_s_own(headers: list[tuple[str, object]]) -> None:
    request = httpx.Request("POST", "https://psp.test/v1/payments", headers=headers)  # type: ignore[arg-type]
    assert read_headers(request.headers) == request.headers.multi_items()


def test_every_value_of_a_header_in_order() -> None:
    request = httpx.Request("POST", "https://psp.test/", headers=GIVEN["repeated"])
    pairs = read_headers(request.headers)
    assert values_of(pairs, "content-type") == request.headers.get_list("Content-Type")
    assert values_of(pairs, "idempotency-key") == []


def test_a_frame_is_found_for_the_same_url_object_and_method_only() -> None:
    from idemclient import profiles
    from idemclient._frame import _FRAMES_KEPT, Frame, Frames, origin_of

    resolved = profiles.DEFAULT.resolve("POST", "/v1/payouts", frozenset({"POST"}))
    url = httpx.URL("https://psp.test:8443/v1/payouts")
    frames = Frames()
    frame = frames.keep(Frame(url, "POST", resolved))
    assert frames.get(url, "POST") is frame
    assert frame.origin == origin_of(url) == (b"https", b"psp.test", 8443)
    assert frames.get(url, "GET") is None  # another method: asked again
    assert frames.get(httpx.URL(str(url)), "POST") is None  # another URL object
    assert frames.origin(httpx.URL("http://other.test/")) == (b"http", b"other.test", None)
    for _ in range(_FRAMES_KEPT):  # emptied when full: never more than it keeps
        frames.keep(Frame(httpx.URL("https://psp.test/x"), "POST", resolved))
    assert len(frames._kept) <= _FRAMES_KEPT
