"""How a stateful part of the router says what its state is, for the broker's snapshot.

A part lists its state in ``STATE``: the attributes that the messages it handled built up, and
nothing else. Not the parts it works with (the router wires those when it makes the part), its
settings (the router's :meth:`~broker.routing.router.Router.snapshot` keeps them once, and the
process's own may replace some: ``configure_like``), nor log throttles. :meth:`Stateful.snapshot`
returns those attributes by name; :meth:`Stateful.restore` puts them into a part made afresh.

The values are the part's own records and indexes (``Entry``, ``Channel``, ``Detection``, a
``FilterIndex``), the language's filters and publications and the routing messages held for
custody: ``RouterLog`` pickles the router's snapshot in one piece, so a record two parts share (a
``Channel`` that a stand-in was made on) is still one record once restored. What a version
changes in a part's ``STATE``, or in the shape of one of those records, changes the snapshot's
format (``broker.transport.persistence``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

__all__ = ["Stateful", "restore_slots"]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (broker.compiled); some parts are not
class Stateful:
    STATE: ClassVar[tuple[str, ...]]

    def snapshot(self) -> dict[str, Any]:
        """The part's state, by attribute."""
        return {name: getattr(self, name) for name in self.STATE}

    def restore(self, state: dict[str, Any]) -> None:
        """Take ``state`` (a :meth:`snapshot`'s) as this part's, made afresh."""
        if state.keys() != set(self.STATE):
            raise ValueError(f"{type(self).__name__}: a state of {sorted(state)}, not {sorted(self.STATE)}")
        for name in self.STATE:
            setattr(self, name, state[name])


def restore_slots(record: Any, state: tuple[None, dict[str, Any]]) -> None:
    """Unpickle a slotted dataclass ``record`` (its state is its slots by name) pickled by a
    version with other fields: those it lacks take their defaults, those it no longer has are
    left out. A record whose shape changed so calls it from its ``__setstate__``, so the
    snapshot's format need not change."""
    slots = state[1]
    for item in fields(record):
        if item.name in slots:
            value = slots[item.name]
        else:
            value = item.default_factory() if callable(item.default_factory) else item.default
        setattr(record, item.name, value)
