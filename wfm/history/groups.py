"""Composite historic queries without Spark: the shape they may have, and the join in Python.

A historic composite is an ``&`` of atoms whose variables (``$S$X``, ``$I$X``, ``$F$X``) join them.
``wfm history --store`` joins in Spark (``joins.py``); through the overlay the historians answer
plain filters, so the asker asks each atom as one (:func:`plain_filter`) and joins what comes back
here (:func:`join`). Both order the groups the same way: by the atoms' times, then their ids.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TypeVar

from broker.language import And, Atom, Composite, Filter, Predicate, Publication, Value, Var
from broker.language.model import composite_variables

__all__ = ["join", "joinable_atoms", "plain_filter"]

Row = TypeVar("Row")


def joinable_atoms(composite: Composite) -> list[Atom]:
    """The atoms of an ``&`` of atoms; ValueError for any other shape, or for one variable name
    used with two kinds."""
    operands = composite.operands if isinstance(composite, And) else (composite,)
    if not all(isinstance(o, Atom) for o in operands):
        raise ValueError("a historic composite query is an & of atoms, without nested || ; or Times")
    composite_variables(composite)
    return list(composite.atoms())


def plain_filter(atom: Atom) -> Filter:
    """The atom as a plain filter: each variable becomes "present, with the variable's type", which
    is all a historian can check alone; the join checks the values."""
    return Filter(
        atom.filter.cls,
        tuple(
            Predicate(p.attribute, "isPresent", "" if p.value.kind == "S" else 0)
            if isinstance(p.value, Var)
            else p
            for p in atom.filter.predicates
        ),
    )


def join(
    atoms: Sequence[Atom],
    rows: Sequence[Sequence[Row]],
    publication: Callable[[Row], Publication],
    order: Callable[[Row], tuple[float, str]],
) -> list[tuple[Row, ...]]:
    """Every group of rows, one per atom (``rows[i]`` matched ``atoms[i]``), in which each variable
    binds one value (across atoms, and within an atom that uses it twice); ordered by the rows'
    ``order`` keys (time, id): all times first, then ids. The groups are built in memory: a
    composite whose atoms share no variable is their whole product."""
    groups: list[tuple[tuple[Row, ...], dict[str, Value]]] = [((), {})]
    for atom, candidates in zip(atoms, rows, strict=True):
        uses = [(p.value, p.attribute) for p in atom.filter.predicates if isinstance(p.value, Var)]
        shared = sorted({var.name for var, _ in uses if groups and var.name in groups[0][1]})
        by_key: defaultdict[tuple[Value, ...], list[tuple[Row, dict[str, Value]]]] = defaultdict(list)
        for row in candidates:
            bound = _bindings(uses, publication(row))
            if bound is not None:
                by_key[tuple(bound[name] for name in shared)].append((row, bound))
        groups = [
            ((*group, row), {**bindings, **bound})
            for group, bindings in groups
            for row, bound in by_key.get(tuple(bindings[name] for name in shared), ())
        ]
    keyed = [(tuple(order(row) for row in group), group) for group, _ in groups]
    keyed.sort(key=lambda item: ([k[0] for k in item[0]], [k[1] for k in item[0]]))
    return [group for _, group in keyed]


def _bindings(uses: Sequence[tuple[Var, str]], values: Publication) -> dict[str, Value] | None:
    """The values the atom's variables take in one publication; None if one has the wrong type
    (``$I$`` binds integers only) or one variable used twice takes two values."""
    bound: dict[str, Value] = {}
    for var, attribute in uses:
        value = values[attribute]
        if not var.accepts(value) or bound.setdefault(var.name, value) != value:
            return None
    return bound
