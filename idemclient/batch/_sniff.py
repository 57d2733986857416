"""What a payout file is when it is not CSV in UTF-8, said before it is parsed.

Operators export payout files from spreadsheets, and a spreadsheet saves many things
under a name ending in .csv: its own workbook, "Unicode Text" (UTF-16), the local
8-bit encoding (Windows-1252), a first line ``sep=;`` that only Excel reads. Parsed as
CSV, each fails with a message about something else (a missing column, a byte
somewhere). So the first bytes are looked at first, and each kind is named, with how
to export the file the command reads; a byte that is not UTF-8 is found at its exact
line (the text decoder reads ahead in chunks, so the parser's line count is not where
the byte is).
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import BinaryIO

__all__ = ["EXPORT", "bad_byte", "not_csv"]

#: How to save a spreadsheet as the file the command reads.
EXPORT = (
    "save it as CSV UTF-8 (Excel: File > Save As > 'CSV UTF-8 (Comma delimited)';"
    " LibreOffice: Save As 'Text CSV', character set 'Unicode (UTF-8)')"
)

#: How many bytes are looked at before the file is parsed.
HEAD = 4096
_ZIP = b"PK\x03\x04"
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
#: Excel's first line naming the separator (``sep=;``), quoted when saved again by a
#: program that quotes every cell.
_SEPARATOR_LINE = re.compile(rb'"?sep=(.)"?\s*')


def not_csv(head: bytes) -> str | None:
    """Why a file starting with `head` is not a CSV file in UTF-8, with what to do;
    None when it may be one."""
    if head.startswith(_ZIP):
        return (
            "is an Excel workbook (.xlsx), or another zip archive, not CSV text: open it in"
            f" the spreadsheet and {EXPORT}"
        )
    if head.startswith(_OLE2):
        return (
            "is an Excel 97-2003 workbook (.xls), not CSV text: open it in the spreadsheet"
            f" and {EXPORT}"
        )
    if head.startswith(_UTF16_BOMS) or _looks_utf16(head):
        return (
            "is UTF-16 text (what Excel saves as 'Unicode Text'), not UTF-8: open it in the"
            f" spreadsheet and {EXPORT}"
        )
    if b"\x00" in head:
        return f"has NUL bytes: it is not a text file. {EXPORT[0].upper()}{EXPORT[1:]}"
    first = head.removeprefix(codecs.BOM_UTF8).split(b"\n", 1)[0].rstrip(b"\r")
    found = _SEPARATOR_LINE.fullmatch(first)
    if found is not None:
        shown = first.decode("utf-8", "replace")
        return (
            f"starts with {shown!r}, a line only Excel reads (it names the separator),"
            " where the header should be: delete that first line, or open the file in"
            f" Excel and {EXPORT}"
        )
    return None


def _looks_utf16(head: bytes) -> bool:
    """UTF-16 without a byte-order mark: ASCII text with every other byte NUL."""
    sample = head[: len(head) - len(head) % 2]
    if len(sample) < 4:
        return False
    even, odd = sample[0::2], sample[1::2]
    return (even.count(0) == 0 and odd.count(0) > len(odd) * 0.9) or (
        odd.count(0) == 0 and even.count(0) > len(even) * 0.9
    )


def bad_byte(path: Path) -> str:
    """Where the first byte of `path` that is not UTF-8 is: its line (counted as the
    file's lines, from 1), its byte, and what to do. Read again line by line: a line
    break is never part of a UTF-8 sequence, so each line decodes on its own."""
    with path.open("rb") as handle:
        found = _first_bad(handle)
    if found is None:  # pragma: no cover - called only after a decoding error
        return f"is not UTF-8 text: {EXPORT}"
    number, column, value = found
    return (
        f"is not UTF-8 text: line {number} has byte 0x{value:02x} at byte {column} of the"
        " line, which UTF-8 does not allow there (the file was saved in another encoding,"
        f" such as Windows-1252 or Latin-1): {EXPORT}"
    )


def _first_bad(handle: BinaryIO) -> tuple[int, int, int] | None:
    for number, line in enumerate(handle, start=1):
        if number == 1:
            line = line.removeprefix(codecs.BOM_UTF8)
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return number, exc.start + 1, line[exc.start]
    return None
