"""The look-up's URL: a template (``/v1/payments?reference={reference}``) filled in
with one operation's key or end-to-end reference.

A value is URL-quoted, and first escaped as a search query's quoted string where the
template puts it inside quotes (Stripe's search syntax); a value such a string cannot
carry safely is refused (`Unquotable`), and the look-up is not made. Pure: no store,
no network.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_plus

import httpx

if TYPE_CHECKING:
    from .._store._base import OperationRecord

__all__ = [
    "Unquotable",
    "by_reference_alone",
    "carried",
    "fill",
    "lookup_url",
    "quoting_of",
    "search_string",
]


class Unquotable(ValueError):
    """A value the look-up's template cannot carry safely: the look-up is not made, and
    the operation stays as it was (never "not found")."""


def lookup_url(template: str, record: OperationRecord, *, quoting: str | None = None) -> str:
    """`template` with `{key}` and `{reference}` filled in (see `fill`); a template that
    starts with `{path}` is the operation's own URL (its origin and path) and the rest."""
    if template.startswith("{path}"):
        own = httpx.URL(record.url).copy_with(query=None, fragment=None)
        template = str(own).replace("{", "{{").replace("}", "}}") + template[len("{path}") :]
    return fill(
        template,
        key=record.key,
        reference=record.reference,
        name=record.operation_id,
        quoting=quoting,
    )


#: A slot right after one of these is inside a quoted string of a search query.
_OPENING_QUOTES = ("'", '"', "%27", "%22")


def quoting_of(template: str) -> str:
    """How `template` quotes its slots when it does not say: "search" if a slot sits
    right after a quote (``'{reference}'``, ``%27{reference}%27``), else "url"."""
    lowered = template.lower()
    for slot in ("{reference}", "{key}"):
        at = lowered.find(slot)
        while at != -1:
            if lowered[:at].endswith(_OPENING_QUOTES):
                return "search"
            at = lowered.find(slot, at + 1)
    return "url"


def search_string(value: str, name: str) -> str:
    """`value` as the inside of a quoted string of a search query (Stripe's syntax: a
    quote escaped with a backslash). A backslash or a control character is refused:
    how the server would read it is not published, and a look-up that reads another
    value could match another payment, or none."""
    for char in value:
        if char == "\\" or ord(char) < 0x20 or ord(char) == 0x7F:
            raise Unquotable(
                f"operation {name!r}: its reference {value!r} holds {char!r}, which a"
                " search query's quoted string cannot carry safely; the look-up was not"
                " made. Settle it by hand, or look it up by {key}"
            )
    return value.replace("'", "\\'").replace('"', '\\"')


def fill(
    template: str, *, key: str, reference: str | None, name: str, quoting: str | None = None
) -> str:
    """`template` with `{key}` and `{reference}` filled in, URL-quoted, and first
    escaped as a search query's quoted string where `quoting` (or, None, the template
    itself: `quoting_of`) says "search"; `name` is the operation's, for errors.
    Raises `Unquotable` for a value the template cannot carry safely."""
    if "{reference}" in template and not reference:
        raise ValueError(
            f"operation {name!r} has no end-to-end reference to look up;"
            " use a look-up by {key} instead"
        )
    if (quoting or quoting_of(template)) == "search":
        key = search_string(key, name)
        reference = search_string(reference, name) if reference else reference
    try:
        return template.format(key=quote(key, safe=""), reference=quote(reference or "", safe=""))
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"look-up {template!r} may only use {{key}} and {{reference}}: {exc}"
        ) from None


def by_reference_alone(template: str) -> bool:
    """Whether a look-up `template` asks by the end-to-end reference alone: the server
    keeps its payments after it has forgotten their keys, so a "none" from it holds
    past the key retention; one that asks by `{key}` too may find nothing because the
    key is forgotten."""
    return "{reference}" in template and "{key}" not in template


def carried(reference: str, record: OperationRecord) -> bool:
    """Whether the request `record` was sent as carries `reference` anywhere a server
    could have kept it from: its URL, a header's stored value, or its body (its bytes,
    a JSON string in it, a form's value). A server finds a payment by a reference it was
    sent; by one the request never carried (`reference=` naming the order's id while the
    body names its number) it finds none, whether the payment was made or not."""
    if reference in unquote_plus(record.url):
        return True
    if any(reference in value for _, value in record.headers):
        return True
    body = record.body
    if not body:
        return False
    text = body.decode("utf-8", "replace")
    if reference in text or reference in unquote_plus(text):
        return True
    try:  # a JSON string escaped (a non-ASCII character as \\u....)
        document = json.loads(text)
    except ValueError:
        return False
    return any(reference in value for value in _strings(document))


def _strings(value: Any) -> list[str]:
    """Every string in a JSON document (its names too), at any depth."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
