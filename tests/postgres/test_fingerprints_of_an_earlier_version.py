"""A store written by the version before fingerprints were by meaning (they were over
the body's bytes, and stores keep them): its operations, issued again after the
upgrade by their ids, are still theirs. The same bytes match, by the rule the record
was written with; a body of the same meaning matches too, where the record still holds
the body its fingerprint was made over; another meaning is refused. No operation is
given a second key and nothing is applied twice, on SQLite and on PostgreSQL.

The earlier version runs in a process of its own, extracted from git, against a
stand-in PSP whose ledger is a file both processes share.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemclient import Client, RetryPolicy, State
from idemclient.errors import OperationMismatch
from idemclient.postgres import PostgresStore
from idemclient.store import SQLiteStore, Store
from tests.batch.hostile.old_version import BYTES_FINGERPRINTS, extract
from tests.support.upload_psp import FileUploadPSP

SUPPORT = Path(__file__).parents[1] / "support"
AUTH = {"Authorization": "Bearer merchant-1"}
OPERATIONS = ("payment-1", "upload-1", "payment-2")
PAYMENT = b'{"amount": 1250, "currency": "EUR", "reference": "inv-1"}'
#: What the earlier version sent: JSON and an upload (its boundary given, so that the
#: same bytes can be sent again), each answer lost after it was applied; and a payment
#: that was answered, so finished.
EARLIER = textwrap.dedent(
    """
    import sys

    import httpx

    from idemclient import Client, Indeterminate, RetryPolicy
    from upload_psp import FileUploadPSP

    where, psp_folder = sys.argv[1], sys.argv[2]
    if where.startswith("postgresql://"):
        from idemclient.postgres import PostgresStore

        store = PostgresStore(where, schema=sys.argv[3])
    else:
        store = where
    psp = FileUploadPSP(psp_folder)
    client = Client(
        store=store,
        transport=httpx.MockTransport(psp.handle),
        base_url="https://psp.test",
        headers={"Authorization": "Bearer merchant-1"},
        policy=RetryPolicy(max_attempts=1),
    )
    with client:
        json_body = {"Content-Type": "application/json"}
        psp.drop_next()
        try:
            client.post("/v1/payments", content=%(payment)r, headers=json_body,
                        operation_id="payment-1")
        except Indeterminate:
            print("payment-1 indeterminate")
        psp.drop_next()
        try:
            client.post("/v1/files", data={"purpose": "dispute_evidence"},
                        files={"file": ("receipt.pdf", b"%%PDF-1.7 receipt", "application/pdf")},
                        headers={"Content-Type": "multipart/form-data; boundary=earlier"},
                        operation_id="upload-1")
        except Indeterminate:
            print("upload-1 indeterminate")
        done = client.post("/v1/payments", content=%(payment)r, headers=json_body,
                           operation_id="payment-2")
        print("payment-2", done.state.value)
    """
) % {"payment": PAYMENT}


@pytest.fixture(params=["sqlite", "postgres"])
def earlier(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Callable[..., Store], Path]:
    """How to open, with this version, a store the earlier version wrote; the PSP's folder."""
    old = extract(tmp_path / "old", BYTES_FINGERPRINTS)
    psp = tmp_path / "psp"
    if request.param == "sqlite":
        where = [str(tmp_path / "client.db")]
    else:
        where = [request.getfixturevalue("pg_shared_url"), request.getfixturevalue("pg_schema")]
    script = tmp_path / "earlier.py"
    script.write_text(EARLIER)
    done = subprocess.run(
        [sys.executable, str(script), where[0], str(psp), *where[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=old,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(old), str(SUPPORT)])),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "payment-1 indeterminate",
        "upload-1 indeterminate",
        "payment-2 succeeded",
    ]

    def open_store(**options: Any) -> Store:
        if request.param == "sqlite":
            return SQLiteStore(where[0], **options)
        return PostgresStore(where[0], schema=where[1], **options)

    with open_store() as store:
        assert all(len(store.get(o).fingerprint) == 64 for o in OPERATIONS)  # type: ignore[union-attr]
    return open_store, psp


def _client(store: Store, psp: FileUploadPSP) -> Client:
    return Client(
        store=store,  # on the real clock, as the earlier version's records were stamped
        transport=httpx.MockTransport(psp.handle),
        base_url="https://psp.test",
        headers=AUTH,
        policy=RetryPolicy(max_attempts=1),
    )


def test_operations_recorded_before_the_upgrade_are_the_same_operations_after_it(
    earlier: tuple[Callable[..., Store], Path],
) -> None:
    open_store, folder = earlier
    psp = FileUploadPSP(folder)
    with open_store() as store, _client(store, psp) as client:
        keys = {o: store.get(o).key for o in OPERATIONS}  # type: ignore[union-attr]
        json_body = {"Content-Type": "application/json"}
        # The same bytes: the record's own rule says so.
        paid = client.post(
            "/v1/payments", content=PAYMENT, headers=json_body, operation_id="payment-1"
        )
        assert (paid.state, paid.replayed, paid.key) == (State.SUCCEEDED, True, keys["payment-1"])
        # The same upload with a boundary httpx drew now: other bytes, the same meaning,
        # read from the body the record keeps.
        uploaded = client.post(
            "/v1/files",
            data={"purpose": "dispute_evidence"},
            files={"file": ("receipt.pdf", b"%PDF-1.7 receipt", "application/pdf")},
            operation_id="upload-1",
        )
        assert (uploaded.state, uploaded.replayed) == (State.SUCCEEDED, True)
        assert uploaded.key == keys["upload-1"]
        sent = psp.sent()
        # Finished before the upgrade: answered from the store, by bytes or by meaning.
        again = {"reference": "inv-1", "currency": "EUR", "amount": 1250}
        for operation_id in ("payment-1", "payment-2"):
            assert client.post("/v1/payments", json=again, operation_id=operation_id).succeeded
            assert client.post(
                "/v1/payments", content=PAYMENT, headers=json_body, operation_id=operation_id
            ).succeeded
        assert psp.sent() == sent
        # Another meaning is still refused, before anything is sent.
        with pytest.raises(OperationMismatch, match="its body"):
            client.post("/v1/payments", json={**again, "amount": 9}, operation_id="payment-2")
        with pytest.raises(OperationMismatch, match="its body"):
            client.post(
                "/v1/files",
                data={"purpose": "dispute_evidence"},
                files={"file": ("receipt.pdf", b"%PDF-1.7 other", "application/pdf")},
                operation_id="upload-1",
            )
        assert psp.sent() == sent
    # One effect per operation, under the key it was first given.
    effects = psp.effects()
    assert sorted(e["key"] for e in effects) == sorted(keys.values())


def test_a_finished_operation_whose_body_was_reaped_is_its_very_bytes(
    earlier: tuple[Callable[..., Store], Path],
) -> None:
    """A record whose body is gone keeps only the fingerprint of its bytes: the same
    bytes are still that operation, answered from the store; a body of the same meaning
    in other bytes can no longer be told from another request, and is refused."""
    open_store, folder = earlier
    psp = FileUploadPSP(folder)
    with open_store(retention=0.001) as store:
        store.reap(now=time.time())
        assert store.get("payment-2").body == b""  # type: ignore[union-attr]
        with _client(store, psp) as client:
            json_body = {"Content-Type": "application/json"}
            done = client.post(
                "/v1/payments", content=PAYMENT, headers=json_body, operation_id="payment-2"
            )
            assert done.state is State.SUCCEEDED
            again = {"reference": "inv-1", "currency": "EUR", "amount": 1250}
            with pytest.raises(OperationMismatch, match="earlier version"):
                client.post("/v1/payments", json=again, operation_id="payment-2")
    assert psp.sent() == 3  # the earlier version's three: nothing more
