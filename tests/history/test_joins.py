"""Composite historic queries against a brute-force evaluation on small data: joined by Spark
(``--store``) and in Python (through the overlay, each atom asked as a plain filter)."""

from __future__ import annotations

import itertools
import random

import pytest

from broker.language import Publication, parse_composite
from broker.language.values import Var
from broker.matching.oracle import matches
from tests.history.conftest import land
from wfm.history.groups import join, joinable_atoms, plain_filter
from wfm.history.joins import query_composite
from wfm.history.store import HistoryStore

T0 = 1_780_000_000.0


def brute_force(composite_text: str, rows: list[tuple[str, float, Publication]]) -> list[tuple[str, ...]]:
    atoms = [a.filter for a in parse_composite(composite_text).atoms()]
    groups = []
    for combo in itertools.product(rows, repeat=len(atoms)):
        if not all(matches(f, p, t) for f, (_, t, p) in zip(atoms, combo, strict=True)):
            continue
        bindings: dict[str, set[object]] = {}
        for f, (_, _, p) in zip(atoms, combo, strict=True):
            for pr in f.predicates:
                if isinstance(pr.value, Var):
                    bindings.setdefault(pr.value.name, set()).add(p[pr.attribute])
        if all(len(values) == 1 for values in bindings.values()):
            groups.append(tuple(id for id, _, _ in combo))
    return sorted(groups)


def rows() -> list[tuple[str, float, Publication]]:
    rng = random.Random(1)
    out = []
    for n in range(40):
        gid = rng.choice(["g1", "g2", "g3", "g4"])
        if rng.random() < 0.3:
            attributes: dict[str, object] = {"applname": rng.choice(["PAYROLL", "BILLING"]), "GID": gid}
            out.append((f"t{n}", T0 + n // 3, Publication("Trigger", attributes)))  # type: ignore[arg-type]
        else:
            attributes = {
                "applname": rng.choice(["PAYROLL", "BILLING"]),
                "GID": gid,
                "jobname": rng.choice(["A", "B"]),
                "status": rng.choice(["SUCCESS", "FAILURE"]),
                "run": rng.choice([1, 2, 2.5]),
                "retry": rng.choice([1, 2]),
            }
            # times repeat, so groups with equal times are ordered by their ids
            out.append((f"s{n}", T0 + n // 3, Publication("JOBSTATUS", attributes)))  # type: ignore[arg-type]
    return out


def joined_here(text: str, data: list[tuple[str, float, Publication]]) -> list[tuple[str, ...]]:
    """What ``wfm history --broker`` does with a composite: each atom asked as a plain filter (what
    a historian answers, in time order), the answers joined in Python."""
    atoms = joinable_atoms(parse_composite(text))
    answers = [
        sorted((row for row in data if matches(plain_filter(atom), row[2], T0)), key=lambda r: (r[1], r[0]))
        for atom in atoms
    ]
    groups = join(atoms, answers, lambda row: row[2], lambda row: (row[1], row[0]))
    return [tuple(id for id, _, _ in group) for group in groups]


COMPOSITES = pytest.mark.parametrize(
    "text",
    [
        "{{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$G]}"
        "&{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[GID,eq,$S$G],[status,eq,FAILURE]}}",
        "{{[class,eq,JOBSTATUS],[jobname,eq,A],[GID,eq,$S$G],[run,=,$I$R]}"
        "&{[class,eq,JOBSTATUS],[jobname,eq,B],[GID,eq,$S$G],[run,=,$I$R]}"
        "&{[class,eq,Trigger],[applname,eq,BILLING],[GID,eq,$S$G]}}",
        "{[class,eq,Trigger],[GID,eq,$S$G],[applname,eq,BILLING]}",
        "{{[class,eq,Trigger],[applname,eq,BILLING]}&{[class,eq,JOBSTATUS],[run,=,2.5]}}",
        "{{[class,eq,JOBSTATUS],[GID,eq,$S$G]}&{[class,eq,JOBSTATUS],[GID,eq,$S$G],[jobname,eq,A]}}",
        "{{[class,eq,JOBSTATUS],[run,=,$I$R],[retry,=,$I$R]}&{[class,eq,JOBSTATUS],[jobname,eq,B],[run,=,$I$R]}}",
    ],
    ids=[
        "trigger-and-status",
        "three-atoms-two-variables",
        "one-atom",
        "no-variable",
        "same-class",
        "a-variable-twice-in-an-atom",
    ],
)


@COMPOSITES
def test_composite_equals_brute_force(store: HistoryStore, text: str) -> None:
    data = rows()
    land(store, data)
    got = [tuple(s.id for s in group) for group in query_composite(store, parse_composite(text), now=T0)]
    assert sorted(got) == brute_force(text, data)
    assert got, "the data should give some groups"
    assert got == joined_here(text, data)  # the same groups in the same order either way


@COMPOSITES
def test_joined_in_python_equals_brute_force(text: str) -> None:
    data = rows()
    got = joined_here(text, data)
    assert sorted(got) == brute_force(text, data) and got
    times = {id: time for id, time, _ in data}
    keys = [([times[id] for id in group], list(group)) for group in got]
    assert keys == sorted(keys)  # by the atoms' times, then their ids


def test_a_variable_becomes_presence_of_its_type() -> None:
    [atom] = parse_composite("{[class,eq,a],[g,eq,$S$G],[n,=,$I$N],[x,=,$F$X],[k,eq,v]}").atoms()
    assert str(plain_filter(atom)) == "[class,eq,a],[g,isPresent,''],[k,eq,v],[n,isPresent,0],[x,isPresent,0]"


def test_only_and_of_atoms(store: HistoryStore) -> None:
    with pytest.raises(ValueError, match="an & of atoms"):
        list(query_composite(store, parse_composite("{{[class,eq,a]}||{[class,eq,b]}}")))
    with pytest.raises(ValueError, match="an & of atoms"):
        joinable_atoms(parse_composite("{{[class,eq,a]}&{{[class,eq,b]}||{[class,eq,c]}}}"))
    with pytest.raises(ValueError):
        joinable_atoms(parse_composite("{{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,=,$I$G]}}"))
