import math
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemclient._retry_after import MAX_SERVER_WAIT
from idemclient.policy import parse_retry_after

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def http_date(offset: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + offset, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),  # nothing said: back off by ourselves
        ({"Retry-After": "5"}, 5.0),  # delta-seconds
        ({"Retry-After": "0"}, 0.0),  # retry now
        ({"Retry-After": " 7 "}, 7.0),  # surrounding blanks tolerated
        ({"Retry-After": "1.5"}, 1.5),  # decimals, as some servers send
        ({"Retry-After": http_date(30)}, 30.0),  # HTTP-date
        ({"Retry-After": "Fri, 15 Jan 2027 08:00:30 -0000"}, 30.0),  # zone-less date is GMT
        ({"Retry-After": http_date(-30)}, None),  # a date in the past: no instruction
        ({"Retry-After": http_date(0)}, None),  # now is not in the future
        ({"retry-after-ms": "1500"}, 1.5),  # milliseconds
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # ms is more precise: wins
        ({"retry-after-ms": "junk", "Retry-After": "9"}, 9.0),  # unusable ms: seconds
        ({"Retry-After": "-1"}, None),  # negative
        ({"Retry-After": "NaN"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "1e20"}, None),  # exponent notation is not delta-seconds
        ({"Retry-After": "1_000"}, None),
        ({"Retry-After": "."}, None),
        ({"Retry-After": "1.2.3"}, None),
        ({"Retry-After": "soon"}, None),  # garbage
        ({"Retry-After": ""}, None),
        ({"retry-after-ms": "-5"}, None),
        ({"Retry-After": "9" * 400}, MAX_SERVER_WAIT),  # huge but valid: clamped
        ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, MAX_SERVER_WAIT),  # far future
        ({"Retry-After": "Mon, 32 Foo 2027 99:99:99 GMT"}, None),  # a broken date
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    result = parse_retry_after(httpx.Headers(headers), NOW)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


@given(st.text(max_size=60))
def test_any_text_gives_a_finite_non_negative_wait_or_none(text: str) -> None:
    for name in ("retry-after", "retry-after-ms"):
        result = parse_retry_after({name: text}, NOW)
        assert result is None or (math.isfinite(result) and 0 <= result <= MAX_SERVER_WAIT)
