import hashlib
import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemclient import _fingerprint as _fp
from idemclient._fingerprint import (
    body_type,
    bytes_fingerprint,
    fingerprint,
    fingerprints,
    is_current,
    same,
)

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
URL = httpx.URL("https://psp.test/v1/files?x=1")


def _by_the_formula(method: str, raw_path: bytes, body: bytes) -> str:
    # sha256 over method, path with query, and body, each prefixed by its length
    # (8 bytes, big-endian): the fingerprints earlier versions wrote into stores.
    digest = hashlib.sha256()
    for part in (method.encode(), raw_path, body):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("POST", "https://psp.test/v1/payments", b'{"amount":100}'),
        ("PATCH", "https://psp.test/", b""),  # no body
        ("POST", "https://psp.test/a%20b?q=1&access_token=", b"\x00" * 300),
    ],
)
def test_the_earlier_rule_is_still_the_formula_stores_hold(
    method: str, url: str, body: bytes
) -> None:
    parsed = httpx.URL(url)
    expected = _by_the_formula(method, parsed.raw_path, body)
    assert bytes_fingerprint(method, parsed, body) == expected
    assert not is_current(expected)
    # A fingerprint an earlier version wrote is compared by its own rule: the bytes.
    assert fingerprints(method, parsed, content_type=JSON).matches(expected, body)
    assert not fingerprints(method, parsed, content_type=JSON).matches(expected, body + b" ")


def test_this_rule_s_fingerprints_say_so() -> None:
    made = fingerprint("POST", URL, b"{}", content_type=JSON)
    assert is_current(made)
    assert made.startswith("v2:")
    assert len(made) == 3 + 64
    assert fingerprints("POST", URL, content_type=JSON)(b"{}") == made
    assert same(made, "POST", URL, b"{ }", content_type=JSON)


def test_the_origin_is_not_fingerprinted() -> None:
    body = b"{}"
    assert fingerprint("POST", httpx.URL("https://a.test/p?x=1"), body) == fingerprint(
        "POST", httpx.URL("http://b.test:8080/p?x=1"), body
    )


def _multipart(boundary: str, *parts: tuple[str, str], close: bool = True) -> bytes:
    """A multipart body: each part its headers (CRLF-separated) and its content."""
    body = b"".join(
        f"--{boundary}\r\n{head}\r\n\r\n{content}\r\n".encode() for head, content in parts
    )
    return body + (f"--{boundary}--\r\n".encode() if close else b"")


def _file(name: str, filename: str, kind: str = "text/plain") -> str:
    return (
        f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        f"Content-Type: {kind}"
    )


def _field(name: str) -> str:
    return f'Content-Disposition: form-data; name="{name}"'


def _mp(boundary: str) -> str:
    return f"multipart/form-data; boundary={boundary}"


# Each row: two bodies (with their content types) that mean the same request.
PURPOSE, FILE = (_field("purpose"), "dispute"), (_file("file", "a.txt"), "hello")
SAME = [
    # JSON: members in any order, any whitespace, any escaping of a string
    ((b'{"amount":100,"currency":"EUR"}', JSON), (b'{ "currency": "EUR",\n "amount": 100 }', JSON)),
    ((b'{"name":"Jos\\u00e9"}', JSON), ('{"name":"José"}'.encode(), JSON)),
    ((b'{"a":[1,2,{"b":1,"c":2}]}', JSON), (b'{"a":[1,2,{"c":2,"b":1}]}', JSON)),
    ((b'{"a":1}', "application/json; charset=utf-8"), (b'{"a": 1}', JSON)),
    ((b'{"a":1}', "application/merchant+json"), (b'{"a": 1}', "application/merchant+json")),
    # a form: fields of different names in any order, + and %20 alike
    ((b"amount=100&note=a+b", FORM), (b"note=a%20b&amount=100", FORM)),
    ((b"a=1&&b=", FORM), (b"b&a=1", FORM)),
    # multipart: the boundary is not the request...
    ((_multipart("A", PURPOSE, FILE), _mp("A")), (_multipart("b-0", PURPOSE, FILE), _mp('"b-0"'))),
    # ... nor the order of parts of different names, a preamble, or an epilogue
    (
        (_multipart("A", PURPOSE, FILE), _mp("A")),
        (b"ignored\r\n" + _multipart("B", FILE, PURPOSE) + b"epilogue", _mp("B")),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("one", "other"), SAME)
def test_two_requests_that_mean_the_same_are_the_same(
    one: tuple[bytes, str], other: tuple[bytes, str]
) -> None:
    assert fingerprint("POST", URL, one[0], content_type=one[1]) == fingerprint(
        "POST", URL, other[0], content_type=other[1]
    )


# Each row: two bodies that mean different requests.
DIFFERENT = [
    ((b'{"amount":100}', JSON), (b'{"amount":101}', JSON)),
    ((b'{"amount":100}', JSON), (b'{"amount":"100"}', JSON)),
    ((b'{"amount":1}', JSON), (b'{"amount":1.0}', JSON)),  # an int is not a float
    ((b'{"a":[1,2]}', JSON), (b'{"a":[2,1]}', JSON)),  # a list keeps its order
    ((b'{"a":1}', JSON), (b'{"a":1}', "text/plain")),  # JSON is not text
    ((b'{"a":1,"a":2}', JSON), (b'{"a":2}', JSON)),  # a name twice: its bytes
    ((b"a=1&a=2", FORM), (b"a=2&a=1", FORM)),  # one name's values keep their order
    ((b"a=1", FORM), (b"a=1&b=", FORM)),
    (
        (_multipart("A", (_file("file", "a.txt"), "hello")), _mp("A")),
        (_multipart("A", (_file("file", "a.txt"), "hellp")), _mp("A")),
    ),
    (
        (_multipart("A", (_file("file", "a.txt"), "hello")), _mp("A")),
        (_multipart("A", (_file("file", "b.txt"), "hello")), _mp("A")),
    ),
    (
        (_multipart("A", (_file("file", "a.txt"), "hello")), _mp("A")),
        (_multipart("A", (_file("file", "a.txt", "text/csv"), "hello")), _mp("A")),
    ),
    (  # two files under one name: their order is theirs
        (_multipart("A", (_file("f", "1.txt"), "one"), (_file("f", "2.txt"), "two")), _mp("A")),
        (_multipart("A", (_file("f", "2.txt"), "two"), (_file("f", "1.txt"), "one")), _mp("A")),
    ),
    (  # a field is not a file of the same bytes
        (_multipart("A", (_field("doc"), "hello")), _mp("A")),
        (_multipart("A", (_file("doc", "doc"), "hello")), _mp("A")),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_two_requests_that_mean_different_things_differ(
    one: tuple[bytes, str], other: tuple[bytes, str]
) -> None:
    assert fingerprint("POST", URL, one[0], content_type=one[1]) != fingerprint(
        "POST", URL, other[0], content_type=other[1]
    )


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"{not json", JSON),
        (b"\xff\xfe{}", JSON),  # not UTF-8
        (b'{"a": NaN}', JSON),
        (b'{"a": 1e400}', JSON),
        (b"[" * 100_000 + b"]" * 100_000, JSON),  # deeper than the parser goes
        (b"--A\r\nno blank line after the headers--A--", _mp("A")),
        (_multipart("A", (_field("x"), "1"), close=False), _mp("A")),  # never closed
        (_multipart("A", ("Content-Type: text/plain", "no disposition")), _mp("A")),
        (_multipart("A", (_field("x"), "1")), _mp("B")),  # not its boundary
        (_multipart("A", (_field("x") + "\r\n folded", "1")), _mp("A")),
    ],
)
def test_a_body_that_is_not_what_it_says_is_its_bytes(body: bytes, content_type: str) -> None:
    made = fingerprint("POST", URL, body, content_type=content_type)
    assert made == fingerprint("POST", URL, body, content_type=content_type)  # no error
    assert made != fingerprint("POST", URL, body + b"\x00", content_type=content_type)


def test_a_compressed_body_is_its_bytes() -> None:
    def made(body: bytes) -> str:
        return fingerprint("POST", URL, body, content_type=JSON, content_encoding="gzip")

    assert made(b'{"a":1}') != made(b'{"a": 1}')


def test_the_method_path_and_query_are_the_request_too() -> None:
    body, kind = b'{"a":1}', {"content_type": JSON}
    base = fingerprint("POST", URL, body, **kind)
    assert base != fingerprint("PATCH", URL, body, **kind)
    assert base != fingerprint("POST", URL.copy_with(path="/v1/other"), body, **kind)
    assert base != fingerprint("POST", URL.copy_with(query=b"x=2"), body, **kind)


def test_the_body_type_is_read_from_stored_headers() -> None:
    assert body_type([("Content-Type", JSON), ("authorization", None)]) == {
        "content_type": JSON,
        "content_encoding": None,
    }
    assert body_type(()) == {"content_type": None, "content_encoding": None}


def test_the_body_type_of_lowercase_names_is_read_by_the_same_rule() -> None:
    """A live request's headers (names lowercased once) are read as stored ones are:
    the last of a repeated content type or encoding is the one taken."""
    given = [
        [("content-type", "text/plain"), ("content-type", JSON)],
        [("content-encoding", "gzip"), ("accept", "*/*"), ("content-encoding", "identity")],
        [("content-type", JSON), ("content-length", "2")],
        [],
    ]
    for headers in given:
        assert body_type(headers, lowercase=True) == body_type(headers)
    assert body_type(given[0], lowercase=True)["content_type"] == JSON


def test_httpx_uploads_drawn_with_new_boundaries_are_one_request() -> None:
    client = httpx.Client(base_url="https://psp.test")
    files = {"file": ("statement.pdf", b"%PDF-1.7 ...", "application/pdf")}

    def made() -> tuple[bytes, str]:
        request = client.build_request("POST", "/v1/files", data={"purpose": "x"}, files=files)
        return request.read(), fingerprint(
            "POST", request.url, request.content, **body_type(request.headers.multi_items())
        )

    (one, first), (other, second) = made(), made()
    assert one != other  # httpx drew a new boundary
    assert first == second


@pytest.mark.parametrize(
    ("method", "url", "body", "content_type", "content_encoding", "recorded"),
    [
        (
            "POST",
            "https://psp.test/v1/payments?x=1",
            b'{"b": 1, "a": [1.5, "\\u00e9"]}',
            JSON,
            None,
            "v2:e371daacb6def353876b5eba65e1f753837f0a9bb9d39ce4d59f78180d3b30ae",
        ),
        (  # a name twice: not one JSON value, so its bytes
            "POST",
            "https://psp.test/v1/payments",
            b'{"a":1,"a":2}',
            JSON,
            None,
            "v2:8bcdd8e434746724e4f965a765e311a8f41b5390e39c95a256e2536570fc96d2",
        ),
        (
            "PUT",
            "https://psp.test/v1/forms",
            b"b=2&a=1&a=%20x+y",
            FORM,
            None,
            "v2:6543341b9ae4cb43e6561c3e834bb487e2556484bbf7216ee3045526a49d2a76",
        ),
        (
            "POST",
            "https://psp.test/v1/files",
            b'--XX\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\n'
            b"Content-Type: text/plain\r\n\r\nhello\r\n--XX--\r\n",
            "multipart/form-data; boundary=XX",
            None,
            "v2:7f41c403acd002644ed531af0b8d585c31fe5ce3bd777346ddef4138bdef5d88",
        ),
        (
            "PATCH",
            "https://psp.test/",
            b"",
            None,
            None,
            "v2:faf59affe3f62b3fd84516aecaa2b077b0a01ea32809671cbe483dcd628f385d",
        ),
        (
            "POST",
            "https://psp.test/v1/payments",
            b'{"a":1}',
            JSON,
            "gzip",
            "v2:f0354fec134cbf10ed0ba1656d33fcfc91410654d6666ab98f70b65da0530e5c",
        ),
        (
            "POST",
            "https://psp.test/v1/payments",
            b"\x00raw",
            "application/octet-stream",
            None,
            "v2:89b9134f279f7edd22fb44d9f4a4d304b87b7bde6ac33c5211dc813b573ecd12",
        ),
    ],
)
def test_fingerprints_stores_hold_are_made_again_to_the_bit(
    method: str,
    url: str,
    body: bytes,
    content_type: str | None,
    content_encoding: str | None,
    recorded: str,
) -> None:
    # Fingerprints this rule wrote into stores (JSON, a form, multipart, no body, a
    # compressed body, bytes), as they were written: a request re-issued after an
    # upgrade must make them again exactly, or it is refused as another request.
    parsed = httpx.URL(url)
    kind = {"content_type": content_type, "content_encoding": content_encoding}
    for _ in range(2):  # made afresh, then by the kept start of its method and path
        assert fingerprint(method, parsed, body, **kind) == recorded
        assert fingerprints(method, parsed, **kind)(body) == recorded
        assert same(recorded, method, parsed, body, **kind)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    value=_JSON_VALUES,
    spacing=st.sampled_from(["", " ", "\n", "\t "]),
    indent=st.sampled_from([None, 2]),
    ascii=st.booleans(),
)
def test_a_json_body_s_meaning_is_read_as_the_decoder_and_encoder_read_it(
    value: object, spacing: str, indent: int | None, ascii: bool
) -> None:
    """The meaning hashed is what the strict decoder and the sorted, compact encoder
    make of the body (the form stores hold), whatever the body's spacing and escaping,
    however it is read and written quickly."""
    text = spacing + json.dumps(value, indent=indent, ensure_ascii=ascii) + spacing
    body = text.encode("utf-8", "surrogatepass")
    expected = _fp._ENCODER.encode(_fp._DECODER.decode(text)).encode("utf-8", "surrogatepass")
    assert _fp._json(body) == expected


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"a":1}x', b"bytes"),  # something after the document
        (b'{"a":1} {"a":2}', b"bytes"),  # two documents
        (b'{"a":1}\r\n', b"json"),  # whitespace after it: one document
        (b' \n{"a":1}', b"json"),  # whitespace before it
    ],
)
def test_only_a_body_that_is_one_json_document_is_read_as_json(body: bytes, kind: bytes) -> None:
    assert _fp._reader(JSON, None)(body)[0] == kind
