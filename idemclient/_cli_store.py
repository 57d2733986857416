"""The `--store` option of the commands: a SQLite file or a PostgreSQL URL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._seam import POSTGRES_SCHEMES, store_absent

__all__ = ["STORE_HELP", "StoreLocation", "describe_missing"]

STORE_HELP = "The store of operations: a SQLite file, or a postgresql:// URL."

#: libpq's keyword/value connection string (`host=db port=5432 dbname=payroll`): a
#: PostgreSQL store given so, taken for a file's name, would be a new empty SQLite store.
_KEYWORD_FORM = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode)\s*=", re.ASCII
)


if TYPE_CHECKING:
    _ParamType = click.ParamType[Path | str]
else:
    # click is generic over the converted value only from 8.2 on; subscripting it at
    # run time would fail on the 8.1 that pyproject still allows.
    _ParamType = click.ParamType


class StoreLocation(_ParamType):
    """A path (as `Path`), or a PostgreSQL URL kept as text: a URL made into a `Path`
    would lose a slash of its ``//``."""

    name = "PATH|URL"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path | str:
        if isinstance(value, Path):
            return value
        text = str(value)
        if text.startswith(POSTGRES_SCHEMES):
            return text
        if _KEYWORD_FORM.match(text):
            self.fail(
                "a PostgreSQL connection string in keyword form is not read: give it as a"
                " postgresql:// URL (postgresql://user@host:5432/dbname); a SQLite file"
                " whose name begins so is given with its folder (./...)",
                param,
                ctx,
            )
        path = Path(text)
        if path.is_dir():
            self.fail(f"{text!r} is a directory, not a store file", param, ctx)
        return path


def describe_missing(store: Path | str) -> str | None:
    """Why there is no store at `store` to read, or None when there may be one.

    A SQLite file that does not exist would be created empty, and so would the tables
    of a PostgreSQL database that holds none (a URL to the wrong database): a command
    that reads a store says so instead, and creates nothing there.
    """
    return store_absent(store)
