"""When a generation is over (the coordinator's APPL_END), given the statuses seen so far."""

from __future__ import annotations

import pytest

from workflow_messages import decide_end, end_of, outcome

S = "APPL_START"
PAYROLL = {
    "JobA": [[S, "success"]],
    "JobB": [["JobA", "success"]],
    "JobC": [["JobA", "success"]],
    "JobD": [["JobB", "success"], ["JobC", "success"]],
    "Alert": [["JobA", "failure"]],
}
RECOVERY = {
    "Fetch": [[S, "success"]],
    "Load": [["Fetch", "success"]],
    "Rollback": [["Load", "failure"]],
    "Report": [["Load", "always"]],
}
OK = "SUCCESS"

CASES = [
    # (name, graph, statuses, expected outcome)
    ("nothing yet", PAYROLL, {}, None),
    ("started", PAYROLL, {S: OK}, None),
    ("JobA running", PAYROLL, {S: OK, "JobA": OK}, None),
    ("JobD waits for JobC", PAYROLL, {S: OK, "JobA": OK, "JobB": OK}, None),
    (
        "friday: all ran",
        PAYROLL,
        {S: OK, "JobA": OK, "JobB": OK, "JobC": OK, "JobD": OK},
        ("SUCCESS", "skipped: Alert"),
    ),
    (
        "other days: JobC NORUN",
        PAYROLL,
        {S: OK, "JobA": OK, "JobB": OK, "JobC": "NORUN", "JobD": OK},
        ("SUCCESS", "skipped: Alert"),
    ),
    ("JobA failed, Alert still to run", PAYROLL, {S: OK, "JobA": "FAILURE"}, None),
    (
        "JobA failed, Alert ran",
        PAYROLL,
        {S: OK, "JobA": "FAILURE", "Alert": OK},
        ("FAILURE", "failed: JobA; skipped: JobB, JobC, JobD"),
    ),
    (
        "JobB failed: JobD cannot run",
        PAYROLL,
        {S: OK, "JobA": OK, "JobB": "FAILURE", "JobC": OK},
        ("FAILURE", "failed: JobB; skipped: JobD, Alert"),
    ),
    ("JobB failed, JobC still running", PAYROLL, {S: OK, "JobA": OK, "JobB": "FAILURE"}, None),
    (
        "JobA NORUN counts as done",
        PAYROLL,
        {S: OK, "JobA": "NORUN", "JobB": "NORUN", "JobC": "NORUN", "JobD": "NORUN"},
        ("SUCCESS", "skipped: Alert"),
    ),
    (
        "load ok: rollback skipped",
        RECOVERY,
        {S: OK, "Fetch": OK, "Load": OK, "Report": OK},
        ("SUCCESS", "skipped: Rollback"),
    ),
    ("load ok, report running", RECOVERY, {S: OK, "Fetch": OK, "Load": OK}, None),
    (
        "load failed: rollback and report",
        RECOVERY,
        {S: OK, "Fetch": OK, "Load": "FAILURE", "Rollback": OK, "Report": OK},
        ("FAILURE", "failed: Load"),
    ),
    ("load failed, rollback running", RECOVERY, {S: OK, "Fetch": OK, "Load": "FAILURE", "Report": OK}, None),
    (
        "fetch failed: always needs a status",
        RECOVERY,
        {S: OK, "Fetch": "FAILURE"},
        ("FAILURE", "failed: Fetch; skipped: Load, Rollback, Report"),
    ),
    (
        "skips are transitive",
        {
            "A": [[S, "success"]],
            "B": [["A", "failure"]],
            "C": [["B", "always"]],
            "D": [["C", "success"], ["A", "success"]],
        },
        {S: OK, "A": OK},
        ("SUCCESS", "skipped: B, C, D"),
    ),
    (
        "a skip does not block a job that still may run",
        {"A": [[S, "success"]], "B": [["A", "failure"]], "E": [["A", "success"]]},
        {S: OK, "A": OK},
        None,
    ),
    (
        "statuses of other jobs are ignored",
        {"A": [[S, "success"]]},
        {S: OK, "A": OK, "APPL_END": OK},
        ("SUCCESS", ""),
    ),
]


@pytest.mark.parametrize(("graph", "statuses", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outcome(
    graph: dict[str, list[list[str]]], statuses: dict[str, str], expected: tuple[str, str] | None
) -> None:
    assert outcome(graph, statuses) == expected


def test_a_failed_start_is_impossible_to_follow() -> None:
    assert outcome({"A": [[S, "success"]]}, {S: "FAILURE"}) == ("SUCCESS", "skipped: A")


def test_a_cycle_is_refused() -> None:
    with pytest.raises(ValueError, match="cycle"):
        outcome({"A": [["B", "success"]], "B": [["A", "success"]]}, {})


def test_the_coordinator_ends_nothing_before_appl_start_and_a_cycle_as_failure() -> None:
    finished = {"JobA": OK, "JobB": OK, "JobC": OK, "JobD": OK}
    assert decide_end(PAYROLL, finished) is None
    assert decide_end(PAYROLL, {S: OK, **finished}) == ("SUCCESS", "skipped: Alert")
    cycle = {"A": [["B", "success"]], "B": [["A", "success"]]}
    assert decide_end(cycle, {S: OK}) == ("FAILURE", "the graph has a cycle")


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        ((), ("SUCCESS", "skipped: Alert")),
        (("JobA",), ("FAILURE", "failed: JobA; skipped: JobB, JobC, JobD")),
        (("JobB",), ("FAILURE", "failed: JobB; skipped: JobD, Alert")),
        ((S,), ("SUCCESS", "skipped: JobA, JobB, JobC, JobD, Alert")),  # a bad trigger: as decide_end
    ],
)
def test_end_of_from_the_failures_the_end_jobs_carry(
    failed: tuple[str, ...], expected: tuple[str, str]
) -> None:
    assert end_of(PAYROLL, failed) == expected
    assert end_of({"A": [["B", "success"]], "B": [["A", "success"]]}, ()) == (
        "FAILURE",
        "the graph has a cycle",
    )
