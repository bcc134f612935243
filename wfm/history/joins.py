"""Composite historic queries: ``&`` of atoms sharing ``$S$X`` / ``$I$X`` / ``$F$X`` variables.

Each atom selects its matching rows (the same compiled filter as a plain query); atoms are then
joined on the columns their variables bind, so "every Trigger of PAYROLL with the JOBSTATUS of the
same GID" is one Spark join rather than a loop in Python. Atoms that share no variable pair up every
way (a cross join), as the composite's meaning asks.
"""

from __future__ import annotations

import time as clock
from collections.abc import Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from broker.language import Composite, Var
from wfm.history.groups import joinable_atoms
from wfm.history.landing import StoredPublication
from wfm.history.spark_filter import value_column
from wfm.history.store import HistoryStore, to_stored

__all__ = ["query_composite"]


def query_composite(
    store: HistoryStore,
    composite: Composite,
    since: float | None = None,
    until: float | None = None,
    now: float | None = None,
) -> Iterator[tuple[StoredPublication, ...]]:
    """Every group of stored publications, one per atom (in ``composite.atoms()`` order), that
    matches its atom with equal values for each shared variable; ordered by the groups' times.
    ValueError at once (not when first iterated) for a composite that is not an & of atoms."""
    joinable_atoms(composite)
    groups = _joined(store, composite, since, until, clock.time() if now is None else now)
    return _reading(store, groups)


def _reading(
    store: HistoryStore, groups: Iterator[tuple[StoredPublication, ...]]
) -> Iterator[tuple[StoredPublication, ...]]:
    """The groups, with the store's files kept from compaction while they are read."""
    with store.reading():
        yield from groups


def _joined(
    store: HistoryStore,
    composite: Composite,
    since: float | None,
    until: float | None,
    now: float,
) -> Iterator[tuple[StoredPublication, ...]]:
    frame = store.frame()
    columns = frame.columns
    joined: DataFrame | None = None
    bound: set[str] = set()
    for index, atom in enumerate(composite.atoms()):
        uses: dict[str, list[Column]] = {}  # variable -> its columns (one per use in the atom)
        for p in atom.filter.predicates:
            if isinstance(p.value, Var):
                uses.setdefault(p.value.name, []).append(
                    value_column(p.attribute, p.value.kind == "S", columns)
                )
        side = store.select(atom.filter, since, until, now, frame)
        for first, *others in uses.values():  # a variable used twice in one atom binds one value
            for other in others:
                side = side.where(first == other)
        variables = {name: cols[0].alias(f"var_{name}") for name, cols in uses.items()}
        side = side.select(
            F.struct(*[F.col(f"`{c}`") for c in columns]).alias(f"atom{index}"), *variables.values()
        )
        keys = [f"var_{name}" for name in variables if name in bound]
        joined = (
            side if joined is None else joined.join(side, keys, "inner") if keys else joined.crossJoin(side)
        )
        bound |= set(variables)
    assert joined is not None
    atoms = [f"atom{i}" for i, _ in enumerate(composite.atoms())]
    ordered = joined.orderBy(*[F.col(f"{a}.time") for a in atoms], *[F.col(f"{a}.id") for a in atoms])
    for row in ordered.toLocalIterator():
        yield tuple(to_stored(row[a], columns) for a in atoms)
