"""Frozen values built fast: the constructor of a frozen, slotted dataclass without one
`object.__setattr__` call per field.

A frozen dataclass refuses `self.name = value`, so its generated `__init__` sets every
field through `object.__setattr__`: a lookup and a slow call each. The values every
operation builds (the outcome; the stored record, twice) have up to 28 fields, and
their construction cost more than the rest of what a field costs to move about. A
constructor made here sets the fields on an instance of a twin class (the same slots,
no guard), with plain attribute stores, and then makes it an instance of the value's
class: what comes out is exactly what the class's own constructor gives (its class,
fields, equality, hash, repr and frozenness), at a quarter of the cost.

Only for a class it can build so: a frozen dataclass with slots, directly on `object`
(or on `Generic[T]`, which adds no slot), every field set by `__init__` from its
argument, no `__post_init__`. Anything else is
refused when the constructor is made, never at a call.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

__all__ = ["fast_constructor"]

P = ParamSpec("P")
T = TypeVar("T")

#: A field's default made by its factory, at each call (as the dataclass does).
_FACTORY = object()


def fast_constructor(cls: Callable[P, T]) -> Callable[P, T]:
    """A constructor for `cls` taking its `__init__`'s arguments (the same names, order
    and defaults; typed as the class), that builds the same value faster."""
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    name = cls.__qualname__
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    slots = cls.__dict__.get("__slots__")
    if not params.frozen or not params.init or slots is None:
        raise TypeError(f"{name}: only a frozen dataclass with slots and an __init__")
    if cls.__bases__ not in ((object,), (Generic,)):
        raise TypeError(f"{name}: only a dataclass directly on object (its slots alone)")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{name}: its __post_init__ would not run")
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dataclass_fields__):
        raise TypeError(f"{name}: an InitVar or ClassVar field")
    for field in fields:
        if not field.init or field.kw_only:
            raise TypeError(f"{name}.{field.name}: a field not given to __init__ in order")
        if not field.name.isidentifier() or field.name.startswith("_fc_"):
            raise TypeError(f"{name}.{field.name}: a name this constructor cannot take")
    # On the same base (a generic value's `Generic[T]`, which adds no slot), or the
    # instance could not be given the value's class.
    twin = types.new_class(
        f"_{cls.__name__}Fields",
        getattr(cls, "__orig_bases__", (object,)),
        exec_body=lambda space: space.update(__slots__=slots),
    )
    namespace: dict[str, Any] = {"_fc_twin": twin, "_fc_class": cls, "_fc_factory": _FACTORY}
    arguments, body = [], []
    for index, field in enumerate(fields):
        if field.default is not dataclasses.MISSING:
            namespace[f"_fc_default{index}"] = field.default
            arguments.append(f"{field.name}=_fc_default{index}")
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_fc_make{index}"] = field.default_factory
            arguments.append(f"{field.name}=_fc_factory")
            body.append(f"    if {field.name} is _fc_factory: {field.name} = _fc_make{index}()")
        else:
            arguments.append(field.name)
        body.append(f"    _fc_made.{field.name} = {field.name}")
    source = (
        f"def new({', '.join(arguments)}):\n"
        "    _fc_made = _fc_twin()\n"
        + "\n".join(body)
        + "\n    _fc_made.__class__ = _fc_class\n    return _fc_made\n"
    )
    exec(compile(source, f"<fast constructor of {name}>", "exec"), namespace)  # noqa: S102
    new: Callable[P, T] = namespace["new"]
    new.__qualname__ = new.__name__ = f"new_{cls.__name__}"
    new.__doc__ = f"A {name}, as {name}(...) makes it."
    # The layouts must agree, or every call would fail: find out now.
    probe = twin()
    probe.__class__ = cls
    return new
