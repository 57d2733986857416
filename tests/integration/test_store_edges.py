"""The store's edges, through the public API against the reference server in process:
answers not kept (over the cap, or reaped), secrets in headers and query strings,
headers a resume lacks, and the origin an operation is bound to.

Every client and the server share one ManualClock; nothing really sleeps.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import idemclient
from idemclient import (
    AnswerNotKept,
    AsyncClient,
    Client,
    Indeterminate,
    ManualClock,
    NotSent,
    RetryPolicy,
    State,
)
from idemclient.cli import main
from idemclient.errors import OperationMismatch, StoreUnavailable
from idemclient.store import SQLiteStore
from idemclient.testing import ReferenceServer

PATH = "/v1/payments"
SANDBOX = "http://sandbox.psp.test"
PRODUCTION = "https://api.psp.test"
TOKEN = {"Authorization": "Bearer merchant-1"}


def payment(reference: str) -> dict[str, object]:
    return {"amount": 1250, "currency": "EUR", "reference": reference}


def big_answer(size: int) -> bytes:
    """A JSON answer of about `size` bytes, as a list endpoint or a rich object gives."""
    return b'{"id":"pay_big","pad":"' + b"x" * size + b'"}'


class Counting(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The server's transport, counting what reaches it, by origin."""

    def __init__(self, server: ReferenceServer) -> None:
        self.server = server
        self.sent: list[str] = []
        #: where a client asked the server's time (a HEAD), kept apart from the sends
        self.probed: list[str] = []

    def _count(self, request: httpx.Request) -> None:
        origin = f"{request.url.scheme}://{request.url.host}"
        (self.probed if request.method == "HEAD" else self.sent).append(origin)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._count(request)
        return self.server.transport.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._count(request)
        return await self.server.transport.handle_async_request(request)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(clock: ManualClock) -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=clock) as running:
        yield running


@pytest.fixture
def wire(server: ReferenceServer) -> Counting:
    return Counting(server)


def client(
    store: Path | SQLiteStore,
    clock: ManualClock,
    wire: Counting,
    *,
    base_url: str = SANDBOX,
    headers: dict[str, str] | None = None,
    **options: object,
) -> Client:
    options.setdefault("policy", RetryPolicy(max_attempts=2))
    return Client(
        store=store,
        clock=clock,
        transport=wire,
        base_url=base_url,
        headers=TOKEN if headers is None else headers,
        **options,  # type: ignore[arg-type]
    )


# -- 9. answers kept ----------------------------------------------------------------------


def test_an_answer_over_16_kib_comes_back_whole(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    answer = big_answer(40 * 1024)
    server.answer(201, key="k-big", body=answer, headers={"Content-Type": "application/json"})
    with client(tmp_path / "c.db", clock, wire) as psp:
        first = psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
        again = psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
    assert first.response is not None
    assert first.response.content == answer
    assert again.from_store
    assert again.response is not None
    assert again.response.json()["id"] == "pay_big"  # was an empty body up to 16 KiB
    assert not again.body_omitted
    assert len(wire.sent) == 1


def test_a_compressed_answer_comes_back_from_the_store_readable(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    # The store keeps the body as httpx decoded it: its Content-Encoding no longer holds.
    answer = b'{"id":"pay_gz"}'
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    server.answer(201, key="k-gz", body=gzip.compress(answer), headers=headers)
    with client(tmp_path / "c.db", clock, wire) as psp:
        psp.post(PATH, json=payment("r-gz"), key="k-gz", operation_id="gz")
        again = psp.post(PATH, json=payment("r-gz"), key="k-gz", operation_id="gz")
    assert again.from_store
    assert again.response is not None
    assert again.response.json() == {"id": "pay_gz"}


def not_kept(psp: Client, server: ReferenceServer, size: int = 4096) -> bytes:
    answer = big_answer(size)
    server.answer(201, key="k-big", body=answer, headers={"Content-Type": "application/json"})
    psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
    return answer


def test_an_answer_not_kept_is_flagged_and_never_an_empty_body(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "c.db", max_stored_body=1024)
    with client(store, clock, wire) as psp:
        answer = not_kept(psp, server)
        again = psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
    store.close()
    assert again.state is State.SUCCEEDED  # the payment did succeed
    assert again.from_store
    assert again.body_omitted
    assert again.response is not None
    assert again.response.status_code == 201
    assert again.response.headers["content-type"] == "application/json"
    for read in (
        lambda: again.response.json(),  # type: ignore[union-attr]
        lambda: again.response.content,  # type: ignore[union-attr]
        lambda: again.response.text,  # type: ignore[union-attr]
        lambda: again.response.read(),  # type: ignore[union-attr]
    ):
        with pytest.raises(AnswerNotKept, match="did not keep") as caught:
            read()
        assert caught.value.outcome is again
        assert caught.value.size == len(answer)
        assert caught.value.sha256 == hashlib.sha256(answer).hexdigest()
    assert len(wire.sent) == 1  # never sent again


@pytest.mark.anyio
async def test_an_async_client_says_so_too(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "c.db", max_stored_body=1024)
    server.answer(201, key="k-big", body=big_answer(4096))
    async with AsyncClient(
        store=store, clock=clock, transport=wire, base_url=SANDBOX, headers=TOKEN
    ) as psp:
        await psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
        again = await psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
        assert again.body_omitted
        assert again.response is not None
        with pytest.raises(AnswerNotKept):
            await again.response.aread()
    store.close()


def test_a_wrapped_client_raises_when_it_reads_an_answer_not_kept(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "c.db", max_stored_body=1024)
    server.answer(201, key="k-big", body=big_answer(4096))
    http = httpx.Client(transport=wire, base_url=SANDBOX, headers=TOKEN)
    with idemclient.wrap(http, store=store, clock=clock):
        headers = {"Idempotency-Key": "k-big"}
        assert http.post(PATH, json=payment("r-big"), headers=headers).status_code == 201
        # httpx reads the body at once: the error comes with the outcome.
        with pytest.raises(AnswerNotKept) as caught:
            http.post(PATH, json=payment("r-big"), headers=headers)
        outcome = caught.value.outcome
        assert outcome.state is State.SUCCEEDED
        assert outcome.body_omitted
        assert caught.value.response is not None
        assert caught.value.response.status_code == 201
        # Streamed, the status is there and reading the body raises.
        with http.stream("POST", PATH, json=payment("r-big"), headers=headers) as streamed:
            assert streamed.status_code == 201
            with pytest.raises(AnswerNotKept):
                streamed.read()
    store.close()
    assert len(wire.sent) == 1


def test_a_reaped_answer_is_flagged_and_ops_show_says_so(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    with client(path, clock, wire) as psp:
        answer = not_kept(psp, server)
    # What reaping leaves of a finished operation: the answer's size and sha256.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE operations SET response_body = x'' WHERE id = 'big'")
    with client(path, clock, wire) as psp:
        again = psp.post(PATH, json=payment("r-big"), key="k-big", operation_id="big")
        assert again.body_omitted
        stored = psp.operation("big")
    assert stored is not None
    assert stored.body_omitted
    shown = CliRunner().invoke(main, ["ops", "show", "--store", str(path), "big"])
    assert shown.exit_code == 0, shown.output
    assert "not kept" in shown.output
    assert f"{len(answer)} bytes" in shown.output
    assert hashlib.sha256(answer).hexdigest() in shown.output


# -- 10. secrets ---------------------------------------------------------------------------


def store_bytes(path: Path) -> bytes:
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def test_secret_looking_headers_and_query_values_are_never_written(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    secrets = ["auth_token_value", "api_key_value", "query_token_value", "partner_sig_value"]
    server.answer(201, key="k-signed", headers={"X-Partner-Sig": "partner_sig_value"})
    with client(
        path,
        clock,
        wire,
        headers={**TOKEN, "X-Auth-Token": "auth_token_value", "Api-Key": "api_key_value"},
        secret_headers=["X-Partner-Sig"],
    ) as psp:
        done = psp.post(f"{PATH}?access_token=query_token_value", json=payment("r-secret"))
        assert done.state is State.SUCCEEDED
        signed = psp.post(PATH, json=payment("r-signed"), key="k-signed")
        assert signed.state is State.SUCCEEDED
        record = psp.store.get(done.operation_id)
    assert record is not None
    assert record.url == f"{SANDBOX}{PATH}?access_token="
    assert set(record.withheld_headers) >= {"authorization", "x-auth-token", "api-key"}
    raw = store_bytes(path)
    assert b"r-secret" in raw  # the bytes read are this store's
    for value in secrets:
        assert value.encode() not in raw, value


def test_a_query_token_that_rotated_is_the_same_operation(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    with client(tmp_path / "c.db", clock, wire) as psp:
        first = psp.post(f"{PATH}?access_token=old", json=payment("r-q"), operation_id="q")
        again = psp.post(f"{PATH}?access_token=new", json=payment("r-q"), operation_id="q")
        assert again.from_store
        assert again.key == first.key
        with pytest.raises(OperationMismatch, match="lacks access_token"):
            psp.post(PATH, json=payment("r-q"), operation_id="q")
    assert len(wire.sent) == 1


def test_a_resume_fills_a_secret_query_value_from_the_live_client(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    with client(path, clock, wire) as psp, pytest.raises(Indeterminate):
        psp.post(f"{PATH}?api_key=live_value&x=1", json=payment("r-r"), operation_id="r")
    with client(path, clock, wire) as bare:
        [refused] = bare.resume()
    assert refused.state is State.INDETERMINATE
    assert "lacks api_key" in refused.evidence
    assert len(wire.sent) == 2  # nothing more was sent
    with client(path, clock, wire, params={"api_key": "live_value"}) as live:
        [resumed] = live.resume()
    assert resumed.state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_a_resume_lacking_a_header_the_operation_was_sent_with_sends_nothing(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    with client(path, clock, wire, headers={}) as psp, pytest.raises(Indeterminate):
        psp.post(PATH, json=payment("r-h"), operation_id="h", headers=TOKEN)
    # The token was given for that call only: a resume from a client without it must not
    # send the payment without credentials (nor with stale ones from the store).
    with client(path, clock, wire, headers={}) as bare:
        [refused] = bare.resume()
        with pytest.raises(OperationMismatch, match="Authorization"):
            bare.post(PATH, json=payment("r-h"), operation_id="h")
    assert refused.state is State.INDETERMINATE
    assert "not resumed" in refused.evidence
    assert "Authorization" in refused.evidence
    assert len(wire.sent) == 2
    with client(path, clock, wire) as live:
        [resumed] = live.resume()
    assert resumed.state is State.SUCCEEDED
    assert len(server.ledger()) == 1


def test_headers_named_to_persist_are_resumed_from_the_store(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    extra = {"X-Merchant-Account": "acct_7"}
    with (
        client(path, clock, wire, persist_headers=["X-Merchant-Account"]) as psp,
        pytest.raises(Indeterminate),
    ):
        psp.post(PATH, json=payment("r-p"), operation_id="p", headers=extra)
    seen: list[str | None] = []
    with client(path, clock, wire, event_hooks={"request": [seen_header(seen)]}) as live:
        [resumed] = live.resume()
    assert resumed.state is State.SUCCEEDED
    assert seen == ["acct_7"]


def seen_header(seen: list[str | None]) -> object:
    def hook(request: httpx.Request) -> None:
        seen.append(request.headers.get("X-Merchant-Account"))

    return hook


def test_header_names_are_given_to_a_store_or_a_client_never_both(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "c.db") as store, pytest.raises(TypeError, match="store itself"):
        Client(store=store, secret_headers=["X-Partner-Sig"])
    with pytest.raises(ValueError, match="X-Session-Id"):
        Client(store=tmp_path / "d.db", persist_headers=["X-Session-Id"])


def test_an_older_stores_unfinished_operation_with_a_query_token_still_resumes(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    """Written as earlier versions wrote it: every header but a few, the token in the URL,
    and the fingerprint made over it."""
    path = tmp_path / "c.db"
    SQLiteStore(path).close()
    url = httpx.URL(f"{SANDBOX}{PATH}?access_token=old_token")
    body = b'{"amount":1250,"currency":"EUR","reference":"r-old"}'
    digest = hashlib.sha256()
    for part in (b"POST", url.raw_path, body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    headers = '[["content-type","application/json"],["user-agent","python-httpx/0.27"]]'
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO operations (id, key, method, url, headers, body, fingerprint,"
            " reference, state, attempts, maybe_applied, evidence, created_at, updated_at)"
            " VALUES ('old', 'old-key', 'POST', ?, ?, ?, ?, 'r-old', 'indeterminate', 1, 1,"
            " 'ReadTimeout', ?, ?)",
            (str(url), headers, body, digest.hexdigest(), clock.time(), clock.time()),
        )
    with client(path, clock, wire, params={"access_token": "new_token"}) as live:
        [resumed] = live.resume()
    assert resumed.state is State.SUCCEEDED, resumed.evidence
    assert [entry.idempotency_key for entry in server.ledger()] == ["old-key"]


# -- 12. where an operation goes -----------------------------------------------------------


def test_re_issuing_against_another_origin_sends_nothing_and_names_both(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    with client(path, clock, wire, base_url=SANDBOX) as sandbox, pytest.raises(Indeterminate):
        sandbox.post(PATH, json=payment("r-o"), operation_id="order-7")
    with client(path, clock, wire, base_url=PRODUCTION) as production:
        with pytest.raises(OperationMismatch) as caught:
            production.post(PATH, json=payment("r-o"), operation_id="order-7")
        message = str(caught.value)
        assert SANDBOX in message
        assert PRODUCTION in message
        assert "origin=" in message
    assert wire.sent == [SANDBOX, SANDBOX]
    # Resumed by a client of another base_url, it is not sent: that client's
    # credentials are production's, never given to the sandbox.
    with client(path, clock, wire, base_url=PRODUCTION) as production:
        [left] = production.resume()
    assert left.state is State.INDETERMINATE
    assert "bound to" in (left.evidence or "")
    assert "origin=" in (left.evidence or "")
    assert wire.sent == [SANDBOX, SANDBOX]
    # Resuming sends it where it was first sent, by a client of that origin.
    with client(path, clock, wire, base_url=SANDBOX) as sandbox:
        [resumed] = sandbox.resume()
    assert resumed.state is State.SUCCEEDED
    assert wire.sent == [SANDBOX] * 3
    # Only the caller's requests: no time probe by default (`time_probe=True` asks each
    # origin it is about to send to first).
    assert wire.probed == []


def test_moving_an_operation_is_an_explicit_act(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    with client(path, clock, wire, base_url=SANDBOX) as sandbox, pytest.raises(Indeterminate):
        sandbox.post(PATH, json=payment("r-m"), operation_id="order-8")
    with client(path, clock, wire, base_url=SANDBOX) as anywhere:
        [moved] = anywhere.resume(origin=PRODUCTION)
        assert moved.state is State.SUCCEEDED
        record = anywhere.store.get("order-8")
        assert record is not None
        assert record.url == f"{PRODUCTION}{PATH}"
        # Now bound to production: re-issued from the sandbox it is refused.
        with pytest.raises(OperationMismatch, match=re.escape(f"is bound to {PRODUCTION}")):
            anywhere.post(PATH, json=payment("r-m"), operation_id="order-8")
        with pytest.raises(ValueError, match="http"):
            anywhere.resume(origin="ftp://psp.test")
    assert wire.sent == [SANDBOX, SANDBOX, PRODUCTION]
    assert wire.probed == []  # only the caller's requests


@pytest.mark.anyio
async def test_aresume_moves_too(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    server.drop(path=PATH, times=2)
    with client(path, clock, wire, base_url=SANDBOX) as sandbox, pytest.raises(Indeterminate):
        sandbox.post(PATH, json=payment("r-a"), operation_id="order-9")
    async with AsyncClient(
        store=path, clock=clock, transport=wire, base_url=SANDBOX, headers=TOKEN
    ) as psp:
        [moved] = await psp.resume(origin=PRODUCTION)
    assert moved.state is State.SUCCEEDED
    assert wire.sent[-1] == PRODUCTION


@pytest.mark.parametrize(
    ("method", "url", "body", "differs"),
    [
        ("POST", PATH, payment("r-d"), None),
        ("PATCH", PATH, payment("r-d"), "its method (PATCH, not POST)"),
        ("POST", "/v1/refunds", payment("r-d"), "its path (/v1/refunds, not /v1/payments)"),
        ("POST", f"{PATH}?x=1", payment("r-d"), "its query ('x=1', not '')"),
        ("POST", PATH, payment("r-other"), "its body"),
        ("PATCH", "/v1/refunds", payment("r-other"), "its method"),
    ],
)
def test_a_mismatch_says_what_differs(
    server: ReferenceServer,
    clock: ManualClock,
    wire: Counting,
    tmp_path: Path,
    method: str,
    url: str,
    body: dict[str, object],
    differs: str | None,
) -> None:
    policy = RetryPolicy(methods=frozenset({"POST", "PATCH"}))
    with client(tmp_path / "c.db", clock, wire, policy=policy) as psp:
        psp.post(PATH, json=payment("r-d"), operation_id="d")
        if differs is None:
            assert psp.request(method, url, json=body, operation_id="d").from_store
            return
        with pytest.raises(OperationMismatch, match="differs in") as caught:
            psp.request(method, url, json=body, operation_id="d")
    assert differs in str(caught.value)
    assert "another body" not in str(caught.value)


# -- a store that fails once the server has answered --------------------------------------


class FullAtTheOutcome(SQLiteStore):
    """A store whose disk is full when the outcome is committed."""

    full = False

    def finish(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.full:
            raise StoreUnavailable(self.path, "cannot be used: database or disk is full")
        return super().finish(*args, **kwargs)  # type: ignore[arg-type]


def test_a_refusal_the_store_could_not_record_is_never_reported_not_sent(
    server: ReferenceServer, clock: ManualClock, wire: Counting, tmp_path: Path
) -> None:
    # Found by the checker (adyen): the server declined the payment and kept the refusal
    # under its key; the outcome commit failed; the caller was told NotSent, "nothing
    # reached the server", for a request the server had processed. Now Indeterminate:
    # the store could not keep what the server said.
    server.external_fault(1, "decline")
    store = FullAtTheOutcome(tmp_path / "c.db")
    with client(store, clock, wire) as psp:
        store.full = True
        with pytest.raises(Indeterminate) as raised:
            psp.post(PATH, json=payment("r-declined"), operation_id="declined")
        assert not isinstance(raised.value, NotSent)
        assert raised.value.outcome.last_status == 402
        assert "could not record" in raised.value.outcome.evidence
        store.full = False
        again = psp.post(PATH, json=payment("r-declined"), operation_id="declined")
    store.close()
    assert (again.state, again.last_status) == (State.FAILED, 402)
    (entry,) = server.ledger()
    assert (entry.status, entry.ext1_applied) == ("declined", 1)
