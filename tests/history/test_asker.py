"""How long the asker listens, and what it concludes: :class:`Answers` on a clock the tests set."""

from __future__ import annotations

import pytest

from broker.language import parse_publication
from wfm.history.asker import Answers, historian_of
from wfm.history.protocol import (
    Answer,
    accepted_publication,
    final_publication,
    parse_answer,
    result_publication,
)

ONE = parse_publication("[class,A],[n,1]")
ACCEPTED = parse_answer(accepted_publication("q"))


def result(id: str, at: float) -> Answer:
    return parse_answer(result_publication("q", 1, id, at, ONE))


def final(count: int = 0, error: str = "") -> Answer:
    return parse_answer(final_publication("q", count, error))


def asked() -> Answers:
    """Asked at 100 with the CLI's default timeout (10 s), the protocol's stall (10 s) and grace;
    without the settling time (tested on its own below), so answers may complete at once."""
    return Answers(100.0, 10.0, settle=0.0)


def test_an_answer_is_not_complete_before_the_query_had_time_to_travel() -> None:
    answers = Answers(100.0, 10.0)  # settle: 2 s
    answers.add("near", final(0), 100.05)  # a historian beside the asker, answering at once
    assert answers.wait(100.4) == pytest.approx(1.6)  # a distant one has not had the query yet
    answers.add("far", ACCEPTED, 101.2)
    answers.add("far", final(0), 101.5)
    assert answers.wait(101.5) == pytest.approx(0.5) and answers.wait(102.0) is None


def test_answers_merge_historians_by_id() -> None:
    answers = asked()
    answers.add("h1", result("B1/p/2", 2.0), 101.0)
    answers.add("h2", result("B1/p/1", 1.0), 101.0)
    answers.add("h2", result("B1/p/2", 2.0), 101.0)
    answers.add("h2", final(2), 101.0)
    assert answers.wait(102.0) is not None  # h1 has started but not finished
    answers.add("h1", final(1), 102.0)
    assert answers.wait(102.0) is None and answers.failure() is None and answers.warnings() == []
    assert [r.id for r in answers.in_time_order()] == ["B1/p/1", "B1/p/2"]


def test_with_no_historian_it_waits_out_the_timeout() -> None:
    answers = asked()
    assert answers.wait(100.0) == pytest.approx(10.0)
    assert answers.wait(109.5) == pytest.approx(0.5)
    assert answers.wait(110.0) is None
    assert answers.failure() == "no historian answered within 10 s"


def test_an_accepted_historian_is_waited_for_while_its_heartbeats_come() -> None:
    answers = asked()
    for now in range(101, 150, 2):  # far past the timeout, a heartbeat every 2 s
        answers.add("B2/historian-1", ACCEPTED, now)
        assert answers.wait(now + 1.9) == pytest.approx(8.1)
    answers.add("B2/historian-1", result("B1/p/1", 1.0), 150.0)
    answers.add("B2/historian-1", final(1), 150.0)
    assert answers.wait(150.0) == pytest.approx(0.3)  # the grace, for historians not heard from
    assert answers.wait(150.3) is None
    assert answers.failure() is None and answers.warnings() == []
    assert [r.id for r in answers.in_time_order()] == ["B1/p/1"]


def test_a_silent_historian_has_stopped_answering() -> None:
    answers = asked()
    answers.add("B2/historian-1", ACCEPTED, 101.0)
    answers.add("B2/historian-1", result("B1/p/1", 1.0), 103.0)  # any answer counts as a sign of life
    assert answers.wait(112.5) == pytest.approx(0.5)
    assert answers.wait(113.0) is None
    assert answers.failure() == "historian B2/historian-1 stopped answering (nothing for 10 s)"


def test_several_silent_historians_are_named_on_one_line() -> None:
    answers = asked()
    answers.add("B2/h-1", ACCEPTED, 101.0)
    answers.add("B1/h-1", ACCEPTED, 102.0)
    assert answers.wait(112.0) is None
    assert answers.failure() == "historians B1/h-1, B2/h-1 stopped answering (nothing for 10 s)"


def test_after_the_first_final_marker_every_accepted_historian_is_waited_for() -> None:
    answers = asked()
    answers.add("fast", ACCEPTED, 101.0)
    answers.add("slow", ACCEPTED, 101.5)
    answers.add("fast", result("B1/p/1", 1.0), 102.0)
    answers.add("fast", final(1), 102.0)
    assert answers.wait(105.0) == pytest.approx(6.5)  # long past the grace: slow has accepted
    answers.add("slow", ACCEPTED, 105.0)
    answers.add("slow", result("B1/p/2", 2.0), 108.0)
    answers.add("slow", final(1), 108.0)
    assert answers.wait(108.0) is None
    assert answers.failure() is None and answers.warnings() == []
    assert [r.id for r in answers.in_time_order()] == ["B1/p/1", "B1/p/2"]


def test_the_grace_is_for_historians_not_heard_from() -> None:
    answers = asked()
    answers.add("fast", final(0), 101.0)
    assert answers.wait(101.1) == pytest.approx(0.2)
    answers.add("late", ACCEPTED, 101.2)  # heard within the grace: waited for from now on
    assert answers.wait(101.5) == pytest.approx(9.7)
    answers.add("late", final(0), 102.0)
    assert answers.wait(102.0) is None


def test_the_answers_of_those_that_finished_are_shown_with_a_warning_for_one_that_stalled() -> None:
    answers = asked()
    answers.add("B1/h-1", ACCEPTED, 101.0)
    answers.add("B2/h-1", ACCEPTED, 101.0)
    answers.add("B1/h-1", result("B1/p/1", 1.0), 102.0)
    answers.add("B1/h-1", final(1), 102.0)
    assert answers.wait(110.9) is not None
    assert answers.wait(111.0) is None
    assert answers.failure() is None
    assert answers.warnings() == [
        "historian B2/h-1 stopped answering (nothing for 10 s); the answer may lack what only it kept"
    ]
    assert [r.id for r in answers.in_time_order()] == ["B1/p/1"]


@pytest.mark.parametrize(
    ("finals", "failure"),
    [
        ([final(0, "invalid filter: x")], "invalid filter: x"),
        ([final(0, "invalid filter: x"), final(0, "invalid filter: y")], "invalid filter: x"),
        ([final(0, "query failed: gone"), final(2)], None),  # one historian's answer is still an answer
    ],
)
def test_it_fails_only_if_every_historian_that_finished_refused(
    finals: list[Answer], failure: str | None
) -> None:
    answers = asked()
    for n, answer in enumerate(finals):
        answers.add(f"h{n}", answer, 101.0)
    assert answers.wait(101.3) is None and answers.failure() == failure


def test_what_a_historian_sends_after_its_final_marker_changes_nothing() -> None:
    answers = asked()
    answers.add("h", final(0, "invalid filter: x"), 101.0)
    answers.add("h", final(0, "invalid filter: x"), 101.1)  # its answer to a repeat of the query
    answers.add("h", ACCEPTED, 101.2)
    answers.add("h", result("B1/p/1", 1.0), 101.2)
    assert answers.wait(101.3) is None
    assert answers.failure() == "invalid filter: x" and answers.results == {}


def test_a_historian_is_its_broker_and_client() -> None:
    assert historian_of("B2/historian-1/17") == "B2/historian-1"
    assert historian_of("B1/a/b/7") == "B1/a/b"  # a client name may hold /
