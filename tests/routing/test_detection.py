"""Composite detection on its own: publications in, firings out (the router's matcher replaced
by the literal oracle deciding which atoms a publication matches)."""

from __future__ import annotations

import pytest

from broker.language import Publication, parse_composite, parse_publication
from broker.matching import matches
from broker.routing.detection import Detector


class Feeder:
    def __init__(self, text: str, **options: float) -> None:
        self.composite = parse_composite(text)
        self.atoms = [atom.filter for atom in self.composite.atoms()]
        self.detector = Detector(self.composite, **options)  # type: ignore[arg-type]

    def __call__(self, text: str | Publication, now: float = 0.0) -> list[list[str]]:
        """Publish one; returns each firing as the canonical texts of its publications."""
        publication = parse_publication(text) if isinstance(text, str) else text
        fired = []
        for i, atom in enumerate(self.atoms):
            if matches(atom, publication, now=1.0):
                fired += self.detector.feed(i, publication, now)
        return [[str(p) for p in firing.publications] for firing in fired]


def test_and_of_two_classes_with_a_string_variable() -> None:
    feed = Feeder("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}")
    assert feed("[class,a],[x,'1']") == []
    assert feed("[class,b],[x,'2']") == []  # another binding
    assert feed("[class,b],[x,'1']") == [["[class,a],[x,'1']", "[class,b],[x,'1']"]]
    assert feed("[class,a],[x,'2']") == [["[class,a],[x,'2']", "[class,b],[x,'2']"]]
    assert feed("[class,b],[x,'1']") == []  # the first pair was consumed: fires once
    assert feed.detector.waiting == 1


def test_or_fires_per_publication() -> None:
    feed = Feeder("{{[class,eq,a]}||{[class,eq,b]}}")
    assert feed("[class,a]") == [["[class,a]"]]
    assert feed("[class,b],[n,1]") == [["[class,b],[n,1]"]]
    assert feed("[class,c]") == []


def test_one_publication_can_complete_an_and_by_itself() -> None:
    feed = Feeder("{{[class,eq,a],[x,>,1]}&{[class,eq,a],[y,>,1]}}")
    assert feed("[class,a],[x,5],[y,5]") == [["[class,a],[x,5],[y,5]", "[class,a],[x,5],[y,5]"]]


def test_and_of_ands_and_mixed_nesting() -> None:
    feed = Feeder("{{{[class,eq,a]}&{[class,eq,b]}}&{{[class,eq,c]}&{[class,eq,d]}}}")
    assert [feed(f"[class,{c}]") for c in "abc"] == [[], [], []]
    assert len(feed("[class,d]")[0]) == 4
    either = Feeder("{{{[class,eq,a]}&{[class,eq,b]}}||{[class,eq,c]}}")
    assert either("[class,c]") == [["[class,c]"]]
    assert either("[class,a]") == [] and either("[class,b]") == [["[class,a]", "[class,b]"]]
    both = Feeder("{{{[class,eq,a]}||{[class,eq,b]}}&{[class,eq,c]}}")
    assert both("[class,b]") == [] and both("[class,c]") == [["[class,c]", "[class,b]"]]


def test_number_variables_and_a_three_way_join() -> None:
    feed = Feeder(
        "{{[class,eq,order],[id,=,$I$N]}&{[class,eq,paid],[order,=,$I$N]}&{[class,eq,sent],[order,=,$I$N]}}"
    )
    assert feed("[class,order],[id,7]") == []
    assert feed("[class,paid],[order,7.0]") == []  # 7.0 is the number 7
    assert feed("[class,sent],[order,8]") == []
    assert len(feed("[class,sent],[order,7]")[0]) == 3
    assert feed("[class,paid],[order,7.5]") == []  # $I$ binds integers only


WORKFLOW = (
    "{{{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],[GID,eq,$S$X],[status,eq,SUCCESS]}"
    "||{[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,JobA],[GID,eq,$S$X],[status,eq,NORUN]}}"
    "&{[class,eq,Trigger],[applname,eq,PAYROLL],[GID,eq,$S$X]}}"
)


def status(gid: str, state: str = "SUCCESS") -> str:
    return f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,'{gid}'],[status,{state}]"


def test_workflow_shape_never_mixes_generations() -> None:
    feed = Feeder(WORKFLOW)
    assert feed(status("g1")) == []
    assert feed(status("g2", "NORUN")) == []
    assert feed(status("g3", "FAILURE")) == []  # not a run condition at all
    assert feed("[class,Trigger],[applname,PAYROLL],[GID,'g3']") == []
    fired = feed("[class,Trigger],[applname,PAYROLL],[GID,'g2']")
    assert len(fired) == 1 and all("g2" in p for p in fired[0])
    fired = feed("[class,Trigger],[applname,PAYROLL],[GID,'g1']")
    assert len(fired) == 1 and all("g1" in p for p in fired[0])


def test_sequence_fires_only_in_order() -> None:
    feed = Feeder("{{[class,eq,a],[k,eq,$S$K]};{[class,eq,b],[k,eq,$S$K]}}")
    assert feed("[class,b],[k,x]") == []  # S2 before any S1: never completes
    assert feed("[class,a],[k,x]") == []
    assert feed("[class,b],[k,y]") == []  # other binding
    assert feed("[class,b],[k,x]") == [["[class,a],[k,x]", "[class,b],[k,x]"]]
    assert feed("[class,b],[k,x]") == []


@pytest.mark.parametrize(
    ("step", "values", "fires_at"),
    [
        (1, [1, 2, 3], 2),
        (1, [1, 3, 4, 5], 3),
        (-0.5, [2, 1.5, 1], 2),
        (2, [1, 2, 3, 4, 5], 4),  # two runs interleave: 1,3,5 completes
        (1, [3, 2, 1], None),
    ],
)
def test_times(step: float, values: list[float], fires_at: int | None) -> None:
    feed = Feeder(f"Times({{[class,eq,tick],[n,isPresent,0]}},3,n,{step})")
    fired = [i for i, v in enumerate(values) if feed(f"[class,tick],[n,{v}]")]
    assert fired == ([] if fires_at is None else [fires_at])


def test_waiting_state_is_bounded_oldest_first() -> None:
    feed = Feeder("{{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,eq,$S$G]}}", max_waiting=100)
    for i in range(250):
        feed(f"[class,a],[g,'g{i}']")
    assert feed.detector.waiting == 100 and feed.detector.dropped == 150
    assert feed("[class,b],[g,'g0']") == []  # dropped
    assert feed("[class,b],[g,'g249']") != []  # kept


def test_waiting_state_expires() -> None:
    feed = Feeder("{{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,eq,$S$G]}}", max_age=60)
    feed("[class,a],[g,x]", now=0)
    assert feed("[class,b],[g,x]", now=61) == []
    assert feed.detector.dropped == 1


def test_memory_stays_flat_over_ten_thousand_generations() -> None:
    """Each generation leaves a status nobody completes; clearing it on APPL_END frees it."""
    feed = Feeder(WORKFLOW)
    peak = 0

    def job(gid: str, state: str) -> Publication:
        fields = {"applname": "PAYROLL", "jobname": "JobA", "GID": gid, "status": state}
        return Publication("JOBSTATUS", fields)

    for g in range(10_000):
        gid = f"g{g}"
        feed(job(gid, "SUCCESS"))
        feed(Publication("Trigger", {"applname": "PAYROLL", "GID": gid}))
        feed(job(gid, "NORUN"))  # a late extra status: would wait forever
        peak = max(peak, feed.detector.waiting)
        feed.detector.clear({"X": gid})  # what APPL_END of the generation does
    assert feed.detector.waiting == 0
    assert peak == 1
