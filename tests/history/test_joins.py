"""Composite historic queries against a brute-force evaluation on small data."""

from __future__ import annotations

import itertools
import random

import pytest

from broker.language import Publication, parse_composite
from broker.language.values import Var
from broker.matching.oracle import matches
from tests.history.conftest import land
from wfm.history import HistoryStore
from wfm.history.joins import query_composite

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
    rng = random.Random(5)
    out = []
    for n in range(40):
        gid = rng.choice(["g1", "g2", "g3", "g4"])
        if rng.random() < 0.3:
            attributes: dict[str, object] = {"applname": rng.choice(["PAYROLL", "BILLING"]), "GID": gid}
            out.append((f"t{n}", T0 + n, Publication("Trigger", attributes)))  # type: ignore[arg-type]
        else:
            attributes = {
                "applname": rng.choice(["PAYROLL", "BILLING"]),
                "GID": gid,
                "jobname": rng.choice(["A", "B"]),
                "status": rng.choice(["SUCCESS", "FAILURE"]),
                "run": rng.choice([1, 2, 2.5]),
            }
            out.append((f"s{n}", T0 + n, Publication("JOBSTATUS", attributes)))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize(
    "text",
    [
        "{{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$G]}"
        "&{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[GID,eq,$S$G],[status,eq,FAILURE]}}",
        "{{[class,eq,JOBSTATUS],[jobname,eq,A],[GID,eq,$S$G],[run,=,$I$R]}"
        "&{[class,eq,JOBSTATUS],[jobname,eq,B],[GID,eq,$S$G],[run,=,$I$R]}"
        "&{[class,eq,Trigger],[applname,eq,BILLING],[GID,eq,$S$G]}}",
        "{[class,eq,Trigger],[GID,eq,$S$G],[applname,eq,BILLING]}",
    ],
    ids=["trigger-and-status", "three-atoms-two-variables", "one-atom"],
)
def test_composite_equals_brute_force(store: HistoryStore, text: str) -> None:
    data = rows()
    land(store, data)
    got = sorted(
        tuple(s.id for s in group) for group in query_composite(store, parse_composite(text), now=T0)
    )
    assert got == brute_force(text, data)
    assert got, "the data should give some groups"


def test_only_and_of_atoms(store: HistoryStore) -> None:
    with pytest.raises(ValueError, match="an & of atoms"):
        list(query_composite(store, parse_composite("{{[class,eq,a]}||{[class,eq,b]}}")))
