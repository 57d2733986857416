"""Bodies encrypted at rest, on both backends: nothing of a body (nor its fingerprint,
nor its answer's sha256) is written in clear, rows read back whole, keys rotate with the
old key listed as decrypt-only, and a value that cannot be opened is a `StoreError`,
never garbage. Through the client against the reference server too, and the store's
other edges that both backends share (the allow list, withheld names, origins)."""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from idemclient import Client, ManualClock, State, StoreError
from idemclient._store import Claim, Progress, StoredResponse, new_owner
from idemclient.errors import OperationMismatch, StoreCorrupt
from idemclient.store import BodyEncryption, SQLiteStore, Store
from idemclient.testing import ReferenceServer

from ..store.conftest import NOW, make_intent
from .conftest import StoreFactory, raw_dump

IBAN = "DE89370400440532013000"
BODY = f'{{"amount":4711,"iban":"{IBAN}","name":"Erika Mustermann"}}'.encode()
ANSWER = f'{{"id":"pay_1","iban":"{IBAN}"}}'.encode()
KEY, OLD_KEY = BodyEncryption.new_key(), BodyEncryption.new_key()


def progress() -> Progress:
    return Progress(attempts=1, maybe_applied=True, evidence="HTTP 201", not_before=None, now=NOW)


def pay(store: Store, operation_id: str = "op-1", key: str = "key-1") -> None:
    owner = new_owner()
    store.begin(make_intent(operation_id, key, BODY), owner=owner, now=NOW, lease_until=NOW + 60)
    store.finish(
        operation_id,
        owner=owner,
        state=State.SUCCEEDED,
        progress=progress(),
        response=StoredResponse.of(201, (("Content-Type", "application/json"),), ANSWER),
    )


def read_back(store: Store, operation_id: str = "op-1") -> None:
    record = store.get(operation_id)
    assert record is not None
    assert record.body == BODY
    assert record.fingerprint == make_intent(body=BODY).fingerprint
    assert record.response is not None
    assert record.response.body == ANSWER
    assert record.response.body_sha256 == hashlib.sha256(ANSWER).hexdigest()


def test_nothing_of_a_body_is_written_in_clear(make_store: StoreFactory) -> None:
    store = make_store(encryption=BodyEncryption(KEY))
    pay(store)
    read_back(store)
    raw = raw_dump(store)
    assert b"ref-1" in raw  # the bytes read are this store's
    for secret in (
        IBAN.encode(),
        b"Mustermann",
        make_intent(body=BODY).fingerprint.encode(),  # a guessed body could be confirmed
        hashlib.sha256(ANSWER).hexdigest().encode(),
    ):
        assert secret not in raw, secret
    # A re-issue still recognises the same request, and refuses another one.
    again = store.begin(make_intent(body=BODY), owner=new_owner(), now=NOW, lease_until=NOW)
    assert again.claim is Claim.FINISHED
    with pytest.raises(OperationMismatch, match="its body"):
        store.begin(make_intent(body=b"{}"), owner=new_owner(), now=NOW, lease_until=NOW)


def test_keys_rotate_with_the_old_key_listed_to_decrypt(make_store: StoreFactory) -> None:
    first = make_store(encryption=BodyEncryption(OLD_KEY))
    pay(first, "op-old", "key-old")
    first.close()
    rotated = make_store(encryption=BodyEncryption(KEY, old_keys=[OLD_KEY]))
    pay(rotated, "op-new", "key-new")
    read_back(rotated, "op-old")
    read_back(rotated, "op-new")
    rotated.close()
    # Without the old key, its rows are refused by name, never read as garbage; rows
    # written with the new key still open.
    current = make_store(encryption=BodyEncryption(KEY))
    read_back(current, "op-new")
    with pytest.raises(StoreError, match="not among the keys given") as caught:
        current.get("op-old")
    assert "op-old" in str(caught.value)
    current.close()
    # Without any key: a clear error, whichever row.
    keyless = make_store()
    for operation_id in ("op-old", "op-new"):
        with pytest.raises(StoreError, match="opened without keys"):
            keyless.get(operation_id)


def test_rows_written_in_clear_stay_readable_once_encryption_is_on(
    make_store: StoreFactory,
) -> None:
    plain = make_store()
    pay(plain, "op-clear", "key-clear")
    plain.close()
    store = make_store(encryption=BodyEncryption(KEY))
    read_back(store, "op-clear")
    pay(store, "op-sealed", "key-sealed")
    read_back(store, "op-sealed")


def test_a_damaged_or_moved_value_is_refused(make_store: StoreFactory) -> None:
    store = make_store(encryption=BodyEncryption(KEY))
    pay(store, "op-a", "key-a")
    pay(store, "op-b", "key-b")
    table = "operations" if isinstance(store, SQLiteStore) else f'"{store.schema}".operations'  # type: ignore[attr-defined]
    param = "?" if isinstance(store, SQLiteStore) else "%s"
    with store._use() as conn:  # type: ignore[attr-defined]
        # op-b's body copied into op-a's row: it does not open there.
        select = f"SELECT body FROM {table} WHERE id = {param}"
        (body_b,) = conn.execute(select, ("op-b",)).fetchone()
        conn.execute(f"UPDATE {table} SET body = {param} WHERE id = {param}", (body_b, "op-a"))
        # One bit of op-b's answer flipped.
        (answer,) = conn.execute(
            f"SELECT response_body FROM {table} WHERE id = {param}", ("op-b",)
        ).fetchone()
        flipped = bytes(answer[:-1]) + bytes([answer[-1] ^ 1])
        conn.execute(
            f"UPDATE {table} SET response_body = {param} WHERE id = {param}", (flipped, "op-b")
        )
    for operation_id in ("op-a", "op-b"):
        with pytest.raises(StoreCorrupt, match="damaged or altered"):
            store.get(operation_id)


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (b"short", "32 bytes"),
        ("not base64 at all!", "base64"),
        (BodyEncryption.new_key()[:20], "32 bytes|base64"),
        (12345, "bytes or a base64 str"),
    ],
)
def test_a_bad_key_is_refused_without_showing_it(key: Any, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error) as caught:
        BodyEncryption(key)
    if isinstance(key, str | bytes):
        assert str(key) not in str(caught.value)
    assert KEY not in repr(BodyEncryption(KEY))


def test_without_cryptography_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    real = builtins.__import__

    def without_cryptography(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("cryptography"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_cryptography)
    with pytest.raises(ImportError, match=r"idemclient\[crypto\]"):
        SQLiteStore(tmp_path / "c.db", encryption=BodyEncryption(KEY))


@pytest.fixture
def server() -> Iterator[ReferenceServer]:
    with ReferenceServer(clock=ManualClock()) as running:
        yield running


def test_a_client_on_an_encrypted_store_pays_once_and_answers_from_it(
    make_store: StoreFactory, server: ReferenceServer
) -> None:
    store = make_store(encryption=BodyEncryption(KEY))
    payment = {"amount": 4711, "currency": "EUR", "reference": "r-crypt", "iban": IBAN}
    with Client(
        store=store,
        clock=ManualClock(),
        transport=server.transport,
        base_url="http://psp.test",
        headers={"Authorization": "Bearer merchant-1"},
    ) as psp:
        first = psp.post("/v1/payments", json=payment, operation_id="crypt")
        again = psp.post("/v1/payments", json=payment, operation_id="crypt")
    assert first.response is not None
    assert again.from_store
    assert again.response is not None
    assert again.response.json() == first.response.json()
    assert len(server.ledger()) == 1
    assert IBAN.encode() not in raw_dump(store)


# -- the rest of the store's edges, on both backends ---------------------------------------


def test_request_headers_are_kept_by_an_allow_list_and_names_withheld(
    make_store: StoreFactory,
) -> None:
    store = make_store(persist_headers=["Stripe-Account"])
    headers = (
        ("content-type", "application/json"),
        ("stripe-account", "acct_1"),
        ("x-auth-token", "tok_secret"),
        ("user-agent", "python-httpx"),
    )
    store.begin(make_intent(headers=headers), owner=new_owner(), now=NOW, lease_until=NOW + 60)
    record = store.get("op-1")
    assert record is not None
    assert record.headers == (("content-type", "application/json"), ("stripe-account", "acct_1"))
    assert record.withheld_headers == ("x-auth-token", "user-agent")
    assert b"tok_secret" not in raw_dump(store)
    # Sending it again without a withheld header is refused; registering it is not.
    with pytest.raises(OperationMismatch, match="X-Auth-Token"):
        store.begin(
            make_intent(headers=headers[:2] + headers[3:]),
            owner=new_owner(),
            now=NOW + 100,
            lease_until=NOW + 160,
        )
    assert store.register([make_intent(headers=())], now=NOW) == 0


def test_an_operation_is_bound_to_its_origin_until_moved(make_store: StoreFactory) -> None:
    store = make_store()
    owner = new_owner()
    store.begin(make_intent(), owner=owner, now=NOW, lease_until=NOW + 60)
    elsewhere = make_intent(url="https://api.psp.test/v1/payments")
    with pytest.raises(OperationMismatch, match=r"bound to http://psp\.test"):
        store.begin(elsewhere, owner=new_owner(), now=NOW + 100, lease_until=NOW + 160)
    with pytest.raises(ValueError, match="being sent"):
        store.move("op-1", origin="https://api.psp.test", now=NOW + 1)
    moved = store.move("op-1", origin="https://api.psp.test", now=NOW + 100)
    assert moved.url == "https://api.psp.test/v1/payments"
    taken = store.begin(elsewhere, owner=new_owner(), now=NOW + 100, lease_until=NOW + 160)
    assert taken.claim is Claim.CLAIMED
    with pytest.raises(KeyError):
        store.move("nope", origin="https://api.psp.test", now=NOW)


def test_the_ops_commands_name_an_encrypted_store_they_cannot_read(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from idemclient.cli import main

    path = tmp_path / "sealed.db"
    with SQLiteStore(path, encryption=BodyEncryption(KEY)) as store:
        pay(store)
    for command in (["show", "op-1"], ["list"]):
        result = CliRunner().invoke(main, ["ops", command[0], "--store", str(path), *command[1:]])
        assert result.exit_code == 2, result.output
        assert "encrypted" in result.output
        assert "Traceback" not in result.output


def test_a_payment_found_on_the_server_is_recorded_sealed(make_store: StoreFactory) -> None:
    store = make_store(encryption=BodyEncryption(KEY))
    store.record_settled(
        make_intent(body=BODY),
        state=State.SUCCEEDED,
        evidence="found by look-up",
        now=NOW,
        response=StoredResponse.of(200, (), ANSWER),
    )
    read_back(store)
    (request,) = store.find_requests(reference_tails=["ref-1"])
    assert (request.body, request.fingerprint) == (BODY, make_intent(body=BODY).fingerprint)
    raw = raw_dump(store)
    assert b"found by look-up" in raw  # the bytes read are this store's
    for secret in (
        IBAN.encode(),
        b"Mustermann",
        make_intent(body=BODY).fingerprint.encode(),
        hashlib.sha256(ANSWER).hexdigest().encode(),
    ):
        assert secret not in raw, secret
