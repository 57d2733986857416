"""A payout file paid once, then opened in a spreadsheet and saved again: `00123` comes
back `123`, `1E5` comes back `100000`, `José` comes back decomposed (e and a combining
accent: it looks the same), every other column as it was. Nobody is paid twice: a
reference is compared in Unicode NFC (the same row, its own key), and a row whose
payment the store holds under another reference is held before anything is sent,
naming both (exit 6), until the operator says it is a new payment (`--new-payment REF`
for a row, `--new-payments` for the file), which then pays exactly those rows once.
Stores written before this keep working: their rows are found under either form, and
their payments are digested at the next run. Through the command, against the
reference server on 127.0.0.1, with the ledger counted."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from idemclient import key_from_identity
from idemclient.testing import LiveServer

from ..support import command, ledger_by_reference, read_report, run
from .old_version import BEFORE_NFC, extract, old_submit

HEADER = "ref,employee_id,name,account,amount,currency,value_date\n"
JOSE = "2026-11-José"
#: (reference as first saved, as re-saved, the rest of the row as first saved, as
#: re-saved): a UK account number's leading zeros go with the re-save too.
ROWS = [
    ("00123", "123", "E1,Ada Lovelace,GB51TEST31234094394852,357001", None),
    ("1E5", "100000", "E2,Bob Tanaka,GB51TEST31234094394853,412050", None),
    (
        JOSE,
        unicodedata.normalize("NFD", JOSE),
        "E3,José Álvarez,GB51TEST31234094394854,298000",
        None,
    ),
    ("2026-11-E1004", "2026-11-E1004", "E4,Cy Young,GB51TEST31234094394855,301000", None),
    ("00456", "456", "E5,Dee Rao,00012345,250000", "E5,Dee Rao,12345,250000"),
]
FIRST = [row[0] for row in ROWS]


def write(path: Path, column: int) -> Path:
    """The file as first saved (`column` 0) or as re-saved (1)."""
    lines = [
        f"{row[column]},{row[3] if column and row[3] else row[2]},GBP,2026-11-30\n" for row in ROWS
    ]
    path.write_text(HEADER + "".join(lines), encoding="utf-8")
    return path


def payments(live: LiveServer) -> dict[str, int]:
    """How many payments the server made per reference (in NFC)."""
    return {
        unicodedata.normalize("NFC", reference): len(entries)
        for reference, entries in ledger_by_reference(live).items()
    }


def pay_first(live: LiveServer, tmp_path: Path, by: str, store: Path) -> None:
    original = write(tmp_path / "payroll.csv", 0)
    if by == "this version":
        done = run(command(live.url, original, store))
    else:  # a store written before references were compared in NFC
        old = extract(tmp_path / "old", BEFORE_NFC)
        done = old_submit(
            old, str(original), "--url", live.url, "--token", "payroll-ops", "--store", str(store)
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert payments(live) == dict.fromkeys(FIRST, 1)


@pytest.mark.parametrize("by", ["this version", "the version before"])
def test_the_resaved_file_is_held_paying_nobody_twice(
    live: LiveServer, tmp_path: Path, by: str
) -> None:
    store = tmp_path / "batches.db"
    pay_first(live, tmp_path, by, store)
    resaved = write(tmp_path / "payroll (resaved).csv", 1)
    for _ in range(2):  # as often as it is run
        held = run(command(live.url, resaved, store, report=tmp_path / "r.csv"))
        assert held.returncode == 6, held.stdout + held.stderr
        assert payments(live) == dict.fromkeys(FIRST, 1)  # nothing sent
    # Each row held names both references; the decomposed one is the same row.
    lines = {line["row"]: line for line in read_report(tmp_path / "r.csv")}
    assert "'123' is the same payment as '00123'" in lines["1"]["reason"]
    assert "'100000' is the same payment as '1E5'" in lines["2"]["reason"]
    assert "'456' is the same payment as '00456'" in lines["5"]["reason"]  # its account too
    assert lines["1"]["state"] == lines["2"]["state"] == lines["5"]["state"] == "not_sent"
    assert "--new-payment 123" in held.stderr
    assert lines["3"]["key"] == key_from_identity(JOSE, "payout")  # its one key
    assert lines["3"]["state"] == lines["4"]["state"] == "succeeded"
    assert lines["3"]["already_done"] == "True"


@pytest.mark.parametrize(
    "saying",
    [
        ("--new-payment", "123", "--new-payment", "100000", "--new-payment", "456"),
        ("--new-payments",),
    ],
    ids=["each row", "the file"],
)
def test_saying_new_payment_pays_exactly_those_rows_once(
    live: LiveServer, tmp_path: Path, saying: tuple[str, ...]
) -> None:
    store = tmp_path / "batches.db"
    pay_first(live, tmp_path, "this version", store)
    resaved = write(tmp_path / "payroll (resaved).csv", 1)
    half = run(command(live.url, resaved, store, "--new-payment", "123"))
    assert half.returncode == 6, half.stdout + half.stderr  # 100000 is still held
    assert "'100000' is the same payment as '1E5'" in half.stderr
    assert "'123' is the same payment" not in half.stderr
    for _ in range(2):
        paid = run(command(live.url, resaved, store, *saying))
        assert paid.returncode == 0, paid.stdout + paid.stderr
        assert payments(live) == {**dict.fromkeys(FIRST, 1), "123": 1, "100000": 1, "456": 1}


def test_a_new_payment_that_names_no_row_is_refused(live: LiveServer, tmp_path: Path) -> None:
    done = run(
        command(live.url, write(tmp_path / "p.csv", 0), tmp_path / "b.db", "--new-payment", "x")
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "names no row of the file: 'x'" in done.stderr
    assert live.server.ledger() == ()


def test_one_reference_in_two_unicode_forms_in_one_file_is_one_reference(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(
        HEADER
        + f"{JOSE},E3,A,GB00,100,GBP,2026-11-30\n"
        + f"{unicodedata.normalize('NFD', JOSE)},E4,B,GB01,200,GBP,2026-11-30\n",
        encoding="utf-8",
    )
    done = run(command("http://127.0.0.1:9", path, tmp_path / "b.db"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "repeats row 1" in done.stderr


@pytest.mark.parametrize("how", ["paid", "maybe applied"])
def test_a_row_recorded_decomposed_before_keeps_its_key_when_the_file_says_it_composed(
    live: LiveServer, tmp_path: Path, how: str
) -> None:
    decomposed = unicodedata.normalize("NFD", JOSE)
    first = tmp_path / "first.csv"
    first.write_text(HEADER + f"{decomposed},E3,A,GB00,100,GBP,2026-11-30\n", encoding="utf-8")
    store = tmp_path / "batches.db"
    old = extract(tmp_path / "old", BEFORE_NFC)
    extra: tuple[str, ...] = ()
    if how == "maybe applied":
        live.server.drop(key=key_from_identity(decomposed, "payout"))  # its answer lost
        extra = ("--max-attempts", "1")
    paid = old_submit(
        old, str(first), "--url", live.url, "--token", "payroll-ops", "--store", str(store), *extra
    )
    assert paid.returncode in (0, 3), paid.stdout + paid.stderr
    composed = tmp_path / "second.csv"
    composed.write_text(HEADER + f"{JOSE},E3,A,GB00,100,GBP,2026-11-30\n", encoding="utf-8")
    again = run(command(live.url, composed, store, report=tmp_path / "r.csv"))
    assert again.returncode == 0, again.stdout + again.stderr
    [line] = read_report(tmp_path / "r.csv")
    assert line["key"] == key_from_identity(decomposed, "payout")  # never a second key
    assert payments(live) == {JOSE: 1}


def test_a_payment_made_decomposed_from_another_store_is_found_by_its_look_up(
    live: LiveServer, tmp_path: Path
) -> None:
    decomposed = unicodedata.normalize("NFD", JOSE)
    first = tmp_path / "first.csv"
    first.write_text(HEADER + f"{decomposed},E3,A,GB00,100,GBP,2026-11-30\n", encoding="utf-8")
    old = extract(tmp_path / "old", BEFORE_NFC)
    paid = old_submit(
        old, str(first), "--url", live.url, "--token", "payroll-ops",
        "--store", str(tmp_path / "elsewhere.db"),
    )  # fmt: skip
    assert paid.returncode == 0, paid.stdout + paid.stderr
    # Another machine, an empty store, the file composed: its look-up asks both forms.
    composed = tmp_path / "second.csv"
    composed.write_text(HEADER + f"{JOSE},E3,A,GB00,100,GBP,2026-11-30\n", encoding="utf-8")
    again = run(command(live.url, composed, tmp_path / "here.db"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 found on the server by look-up" in again.stdout
    assert payments(live) == {JOSE: 1}
