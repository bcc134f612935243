"""The pure parts of historic queries over the overlay: message shapes, merging answers, the seam."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from broker.client import Delivery
from broker.language import Publication, parse_filter, parse_publication
from broker.messages import publisher_of
from broker.routing.relations import fits
from tests.signing import DEPLOYER
from wfm.history.asker import Answers, Seam, absolute, without_time
from wfm.history.protocol import (
    Answer,
    accepted_publication,
    attributed,
    decode_text,
    encode_text,
    final_publication,
    parse_answer,
    parse_query,
    query_publication,
    result_advertisement,
    result_publication,
)
from wfm.history.recorder import Recent

AWKWARD = "[class,eq,X],[note,eq,\"it's\"],[ü,str-prefix,'a\"']"


def test_text_survives_as_a_string_value() -> None:
    for text in ["", "plain", 'it\'s "both"', "ü\\u0027", AWKWARD]:
        value = encode_text(text)
        publication = parse_publication(str(Publication("T", {"v": value})))
        assert decode_text(publication["v"]) == text


def test_query_round_trip() -> None:
    text = '[class,eq,JOBSTATUS],[note,eq,"it\'s"]'
    query_id, query = parse_query(parse_publication(str(query_publication("q1", text, 10.5, None))))
    assert query_id == "q1" and not isinstance(query, str)
    assert query.filter == parse_filter(text) and (query.since, query.until) == (10.5, None)


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"filter": encode_text("[class,eq,X],[n,OK]")}, "invalid filter: "),
        ({"filter": "not json"}, "invalid query: "),
        ({"filter": "[" * 100_000}, "invalid query: "),  # RecursionError stopped the historian's reader
        ({"filter": encode_text("[class,eq,X]"), "since": "yesterday"}, "invalid query: since"),
    ],
)
def test_bad_queries_get_a_reason(attributes: dict[str, str], reason: str) -> None:
    query_id, query = parse_query(Publication("HISTORY_QUERY", {"query": "q2", **attributes}))
    assert query_id == "q2" and isinstance(query, str) and query.startswith(reason)


@pytest.mark.parametrize("query_id", ["", "has space", "x" * 65, "it's"])
def test_a_query_without_a_valid_id_is_not_answered(query_id: str) -> None:
    with pytest.raises(ValueError, match="invalid query id"):
        parse_query(Publication("HISTORY_QUERY", {"query": query_id, "filter": encode_text("[class,eq,X]")}))


def test_result_and_final_round_trip() -> None:
    stored = parse_publication('[class,JOBSTATUS],[note,"it\'s"],[n,1.5]')
    answer = parse_answer(result_publication("q3", 7, "B1/c/1", 1795000000.25, stored))
    assert (answer.query, answer.last, answer.seq, answer.id, answer.at) == (
        "q3",
        False,
        7,
        "B1/c/1",
        1795000000.25,
    )
    assert answer.publication == stored
    final = parse_answer(final_publication("q3", 0, "invalid filter: 'x'"))
    assert final.last and final.count == 0 and final.error == "invalid filter: 'x'"
    assert not answer.accepted and not final.accepted


def test_accepted_round_trip() -> None:
    accepted = parse_answer(parse_publication(str(accepted_publication("q4"))))
    assert accepted == Answer("q4", False, accepted=True)


def test_results_fit_the_historians_advertisement() -> None:
    """A publication that fits no advertisement is refused by the broker, so each shape must fit."""
    advertisement = parse_filter(result_advertisement())
    stored = parse_publication("[class,A],[n,1]")
    for publication in [
        accepted_publication("q"),
        result_publication("q", 1, "B1/p/1", 1.0, stored),
        final_publication("q", 1, digest="ab12"),
        final_publication("q", 0, "query failed: x"),
    ]:
        assert fits(publication, advertisement), publication
        sent = DEPLOYER.sign_publication(attributed(publication, "historian@host:42", "alice"))
        assert fits(sent, advertisement), sent  # as the historian sends them, signed and addressed
        assert parse_answer(sent).historian == "historian@host:42"


def test_seam_drops_what_history_returned_and_what_is_out_of_the_window() -> None:
    publication = parse_publication("[class,A],[n,1]")
    answers = Answers(0.0, 10.0)
    answers.add("h", parse_answer(result_publication("q", 1, "B1/p/1", 100.0, publication)), 1.0)
    window = absolute(parse_filter("[class,eq,A],[time,<,now]"), 200.0)
    seam = Seam(window, 50.0, 300.0)
    assert [r.id for r in seam.history(answers)] == ["B1/p/1"]

    def live(id: str, at: float) -> str | None:
        shown = seam.live(Delivery("s", publication, (), id, at))
        return None if shown is None else shown.id

    assert live("B1/p/1", 100.0) is None  # already in the history
    assert live("B1/p/2", 150.0) == "B1/p/2"
    assert live("B1/p/2", 150.0) is None  # once
    assert live("B1/p/3", 40.0) is None  # before since
    assert live("B1/p/4", 200.0) is None  # not before the time predicate's now (200, fixed)


def test_time_references_are_fixed_at_the_askers_now() -> None:
    fixed = absolute(parse_filter("[class,eq,A],[n,>,1],[time,>,now-1h]"), 7200.0)
    assert (
        str(fixed)
        == "[class,eq,A],[n,>,1],[time,>,'"
        + datetime.fromtimestamp(3600, UTC).replace(tzinfo=None).isoformat()
        + "Z']"
    )
    assert str(without_time(fixed)) == "[class,eq,A],[n,>,1]"


def test_publisher_is_the_middle_of_the_id() -> None:
    assert publisher_of("B1/agent/7") == "agent"
    assert publisher_of("B1/a/b/7") == "a/b"
    assert publisher_of("nonsense") == ""


def test_recent_remembers_the_last_ids_only() -> None:
    recent = Recent(2)
    for id in ["a", "b", "c"]:
        recent.add(id)
    assert ("a" in recent, "b" in recent, "c" in recent) == (False, True, True)
