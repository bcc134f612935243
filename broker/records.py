"""How the records of the compiled group (``broker.compiled``) are pickled: alike in both builds.

A broker's snapshot and write-ahead log pickle its routing records (filters, messages held in
custody, channels, index entries). Python pickles a frozen slotted dataclass as the list of its
fields' values, and another object with slots as ``(None, {slot: value})``; mypyc's classes, left
alone, pickle as a dict of attributes and cannot take either back. Records of the group derive
from ``Frozen`` or ``Slotted``, which say how, in the Python format: a log written by either
build, or before the group was compiled, is read by both.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from mypy_extensions import mypyc_attr

__all__ = ["Frozen", "Slotted"]


def _names(record: object) -> tuple[str, ...]:
    """The attributes of a record: its slots, or a compiled class's attributes."""
    kind = type(record)
    names = getattr(kind, "__mypyc_attrs__", None)
    return tuple(names) if names is not None else tuple(kind.__slots__)  # type: ignore[attr-defined]


def _default(item: Any) -> Any:
    return item.default_factory() if item.default_factory is not MISSING else item.default


@mypyc_attr(serializable=True)  # unpickled without its __init__, as in Python (its subclasses too)
class Frozen:
    """A frozen slotted dataclass: pickled as its fields' values in order; a shorter list (one
    pickled before the record had its last fields) leaves those at their defaults."""

    __slots__ = ()

    def __getstate__(self) -> list[Any]:
        return [getattr(self, item.name) for item in fields(self)]  # type: ignore[arg-type]

    def __setstate__(self, state: list[Any]) -> None:
        for index, item in enumerate(fields(self)):  # type: ignore[arg-type]
            object.__setattr__(self, item.name, state[index] if index < len(state) else _default(item))


@mypyc_attr(allow_interpreted_subclasses=True)  # so may its subclasses (mypyc asks it of a base)
class Slotted:
    """A mutable record with slots: pickled as ``(None, {slot: value})``; a dataclass's field
    missing from the state (pickled before it had it) takes its default."""

    __slots__ = ()

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        return None, {name: getattr(self, name) for name in _names(self) if name != "__dict__"}

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        slots = state[1]
        for name, value in slots.items():
            setattr(self, name, value)
        if is_dataclass(self):
            for item in fields(self):
                if item.name not in slots:
                    setattr(self, item.name, _default(item))
