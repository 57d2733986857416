"""A fast constructor builds the very value its class's constructor builds."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

import httpx
import pytest

from idemclient._effects import Blocking, blocking
from idemclient._errors import Outcome, State
from idemclient._frozen import fast_constructor
from idemclient._operations import Sent
from idemclient._outcome import from_record, seen_from_record
from idemclient._settings import CALL_OPTIONS, CallOptions
from idemclient._store._base import (
    Begin,
    Claim,
    Intent,
    OperationRecord,
    Progress,
    StoredResponse,
)
from idemclient._transport import call_extensions

RESPONSE = httpx.Response(201, json={"id": "pay_1"})

RECORD: dict[str, Any] = {
    "operation_id": "op-1",
    "key": "key-1",
    "method": "POST",
    "url": "https://psp.test/v1/payments",
    "headers": (("content-type", "application/json"),),
    "body": b'{"amount":1}',
    "fingerprint": "v2:00",
    "reference": "ref-1",
    "state": State.SUCCEEDED,
    "attempts": 2,
    "maybe_applied": True,
    "evidence": "HTTP 201",
    "not_before": 5.0,
    "lease_owner": None,
    "lease_expires": None,
    "response": StoredResponse.of(201, (("content-type", "application/json"),), b"{}"),
    "created_at": 1.0,
    "updated_at": 2.0,
    "finished_at": 2.0,
    "withheld_headers": ("authorization",),
    "profile": "stripe",
    "sent_at": 1.5,
    "server_sent_at": 1.6,
}

CASES: list[tuple[type[Any], tuple[Any, ...], dict[str, Any]]] = [
    (Outcome, ("op-1", "key-1", State.SUCCEEDED, 1), {}),  # every default
    (
        Outcome,
        ("op-1", "key-1", State.FAILED, 3),
        {
            "response": RESPONSE,
            "replayed": True,
            "from_store": True,
            "evidence": "HTTP 402",
            "not_before": 9.5,
            "maybe_applied": True,
            "last_status": 402,
            "body_omitted": True,
            "existing": "PM1",
            "key_conflict": True,
        },
    ),
    (OperationRecord, (), RECORD),
    (StoredResponse, (200, (("a", "b"),), b"body", "00", 4), {}),
    (
        Intent,
        ("op-1", "key-1", True, "POST", "https://psp.test/p", (), b"{}", "v2:00"),
        {"reference": "r", "profile": "wise"},
    ),
    (Progress, (1, True, "HTTP 503", None, 7.0), {"sent_at": 6.5}),
    (Begin, (Claim.CREATED, OperationRecord(**RECORD)), {}),
    (Sent, (Outcome("op-1", "key-1", State.SUCCEEDED, 1),), {"response": RESPONSE}),
    (CallOptions, ("order-1", "ref-1"), {}),
]


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_the_value_built_is_the_one_its_class_builds(
    cls: type[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    expected = cls(*args, **kwargs)
    made = fast_constructor(cls)(*args, **kwargs)
    assert type(made) is cls
    for each in dataclasses.fields(cls):  # every field set, as the class sets it
        assert getattr(made, each.name) is getattr(expected, each.name), each.name
    assert made == expected
    assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)
    assert not hasattr(made, "__dict__")
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, "another")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, first)
    assert repr(pickle.loads(pickle.dumps(made))) == repr(expected)
    assert copy.copy(made) == expected
    assert dataclasses.replace(made, **{first: getattr(made, first)}) == expected


def test_a_generic_value_is_built_as_its_class_builds_it() -> None:
    # `Blocking[T]` is on `Generic[T]`, which adds no slot (its kwargs, a dict: no hash)
    kwargs = {"sep": ""}
    made = fast_constructor(Blocking)(print, (1,), kwargs)
    assert type(made) is Blocking
    assert made.fn is print
    assert made.args == (1,)
    assert made.kwargs is kwargs
    assert made == Blocking(print, (1,), {"sep": ""})
    assert repr(made) == repr(Blocking(print, (1,), {"sep": ""}))
    assert fast_constructor(Blocking)(print).kwargs == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.fn = len  # type: ignore[misc]


def test_it_takes_the_class_s_arguments_and_refuses_what_the_class_refuses() -> None:
    new = fast_constructor(Outcome)
    assert new(key="k", operation_id="o", attempts=1, state=State.NOT_SENT) == Outcome(
        "o", "k", State.NOT_SENT, 1
    )
    with pytest.raises(TypeError):
        new("o", "k", State.NOT_SENT)  # type: ignore[call-arg]  # attempts missing
    with pytest.raises(TypeError):
        new("o", "k", State.NOT_SENT, 1, operaton_id="typo")  # type: ignore[call-arg]


def test_a_factory_default_is_made_afresh_at_each_call() -> None:
    @dataclass(frozen=True, slots=True)
    class Listed:
        name: str
        items: list[int] = field(default_factory=list)

    new = fast_constructor(Listed)
    one, two = new("a"), new("b")
    assert one == Listed("a")
    assert one.items == []
    assert one.items is not two.items
    assert new("c", [1]).items == [1]


def test_the_hot_path_builds_its_values_so() -> None:
    # What an operation builds on every call, as the classes build them.
    stored = StoredResponse.of(200, (("a", "b"),), b"body")
    assert type(stored) is StoredResponse
    assert stored == StoredResponse(200, (("a", "b"),), b"body", sha256(b"body").hexdigest(), 4)
    extended = call_extensions({"timeout": 1}, operation_id="o", reference="r")
    assert extended == {"timeout": 1, CALL_OPTIONS: CallOptions("o", "r", None)}
    assert type(extended[CALL_OPTIONS]) is CallOptions
    effect = blocking(print, 1, sep="")
    assert type(effect) is Blocking
    assert effect == Blocking(print, (1,), {"sep": ""})


def test_an_outcome_from_a_record_is_built_so() -> None:
    record = OperationRecord(**RECORD)
    outcome = from_record(record, response=RESPONSE, last_status=201)
    assert type(outcome) is Outcome
    assert outcome == Outcome(
        "op-1",
        "key-1",
        State.SUCCEEDED,
        2,
        response=RESPONSE,
        from_store=True,
        evidence="HTTP 201",
        not_before=5.0,
        maybe_applied=True,
        last_status=201,
    )


def test_an_outcome_a_call_tells_is_the_one_from_record_makes() -> None:
    # `seen_from_record` gives every field by position: a field of `Outcome` moved or
    # added shows here as a difference from the outcome made by name.
    record = OperationRecord(**RECORD)
    seen = {
        "replayed": True,
        "from_store": False,
        "last_status": 409,
        "body_omitted": True,
        "existing": "PM1",
        "key_conflict": True,
    }
    outcome = seen_from_record(record, RESPONSE, **seen)
    assert type(outcome) is Outcome
    assert outcome == from_record(record, response=RESPONSE, **seen)
    assert [getattr(outcome, f.name) for f in dataclasses.fields(Outcome)] == [
        "op-1", "key-1", State.SUCCEEDED, 2, RESPONSE, True, False, "HTTP 201", 5.0, True, 409,
        True, "PM1", True,
    ]  # fmt: skip


@dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclass(slots=True)
class _NotFrozen:
    a: int


@dataclass(frozen=True, slots=True)
class _Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a >= 0")


@dataclass(frozen=True, slots=True)
class _KeywordOnly:
    a: int = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class _Base:
    a: int


@dataclass(frozen=True, slots=True)
class _OnABase(_Base):
    b: int


@dataclass(frozen=True, slots=True)
class _NotInit:
    a: int
    b: int = field(init=False, default=0)


@pytest.mark.parametrize(
    ("cls", "why"),
    [
        (int, "not a dataclass"),
        (_NoSlots, "with slots"),
        (_NotFrozen, "frozen"),
        (_Checked, "__post_init__ would not run"),
        (_KeywordOnly, "not given to __init__ in order"),
        (_OnABase, "directly on object"),
        (_NotInit, "not given to __init__ in order"),
    ],
)
def test_a_class_it_cannot_build_so_is_refused_at_once(cls: type[Any], why: str) -> None:
    with pytest.raises(TypeError, match=why):
        fast_constructor(cls)
