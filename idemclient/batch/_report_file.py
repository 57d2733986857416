"""The report's file: checked before anything is sent (`check_report_path`): a path
that cannot be written is refused while nothing has happened yet, and so is the input
file or the store itself. It is written atomically (a temporary file beside it, then a
rename), so a reader never sees half of one, and an earlier report is replaced only by
a whole new one. CSV cells that a spreadsheet would run as a formula (`=`, `+`, `-`,
`@`, and a leading tab or carriage return) are written with a leading `'`."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["check_report_path", "csv_cell", "replace_atomically"]

#: What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text, never runs: a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def replace_atomically(target: Path, write: Callable[[TextIO], None]) -> None:
    """Write a file beside `target` with `write`, then rename it over `target`.

    The file is created with mode 0666 less the umask, as any file a program writes for
    people to read (`mkstemp` makes 0600, which the rename would keep)."""
    handle, temporary = _temporary_beside(target)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _temporary_beside(target: Path) -> tuple[int, str]:
    """A new file beside `target` (its descriptor and path), never an existing one."""
    for _ in range(100):
        path = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(path, flags, 0o666), str(path)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")  # pragma: no cover


def check_report_path(path: str | os.PathLike[str], *, not_these: tuple[Path, ...] = ()) -> None:
    """Refuse, with a `ValueError` saying why, a report path that cannot be written:
    a name that is not .csv or .json, a missing or unwritable directory, a directory,
    or one of `not_these` (the input file, the store). Writes nothing that stays."""
    target = Path(path)
    if target.suffix.lower() not in (".csv", ".json"):
        raise ValueError(f"report {target}: use a .csv or .json file name")
    if target.is_dir():
        raise ValueError(f"report {target} is a directory: give a file name")
    for other in not_these:
        if _same_file(target, other):
            raise ValueError(f"report {target} is {other} itself: it would be overwritten")
    directory = target.parent
    if not directory.is_dir():
        raise ValueError(f"report {target}: the directory {directory} does not exist")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ValueError(f"report {target}: cannot write in {directory} ({exc.strerror})") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False
