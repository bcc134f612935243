"""The ids a broker makes: their wire text, and the one that is read back (``LocalId``)."""

from __future__ import annotations

import pytest

from broker.language import ParseError
from broker.messages import ClientRef, LocalId, OverlayId, PartId, PublicationId

PRINTED = [
    (OverlayId("B1", "agent-1", "7"), "B1/agent-1/7"),
    (PublicationId("B1", "agent-1", "7", "18f3a"), "B1/agent-1/7@18f3a"),
    (LocalId("B2", 12), "B2~12"),
    (PartId(LocalId("B2", 12), 3), "B2~12#3"),
]


@pytest.mark.parametrize(("record", "text"), PRINTED)
def test_an_id_prints_as_its_wire_text(record: object, text: str) -> None:
    assert str(record) == text


@pytest.mark.parametrize("text", ["B1~1", "B2~12", "a.b:c-d~987654321"])
def test_a_local_id_reads_back_what_it_printed(text: str) -> None:
    assert str(LocalId.parse(text)) == text


@pytest.mark.parametrize("text", ["", "B1", "B1~", "~3", "B1~0", "B1~07", "B1~-2", "B1~1#0", "B1/c/1"])
def test_other_text_is_not_a_local_id(text: str) -> None:
    with pytest.raises(ParseError):
        LocalId.parse(text)


def test_local_ids_are_ordered_as_made() -> None:
    made = [LocalId("B1", n) for n in (1, 2, 10)]
    assert sorted(reversed(made)) == made
    assert PartId(made[1], 0) < PartId(made[2], 0)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("B1/agentA/7", ("B1", "agentA", "7")),
        ("B1/agentA/7@18c4f2a9b10", ("B1", "agentA", "7")),  # a publication's id: the session goes
        ("B2/a/b/12@1", ("B2", "a/b", "12")),  # a client name may hold /
    ],
)
def test_overlay_ids_parse_from_their_text(text: str, parts: tuple[str, str, str]) -> None:
    assert OverlayId.parse(text) == OverlayId(*parts)


@pytest.mark.parametrize("text", ["", "B1", "B1/7", "B1//7", "/a/7", "B1/a/"])
def test_overlay_id_parse_refuses_other_text(text: str) -> None:
    with pytest.raises(ParseError, match="expected <broker>/<client>/<ref>"):
        OverlayId.parse(text)


@pytest.mark.parametrize("text", ["7@0192f3a4b5c6deadbeef", "7", "name@", "a@b@c"])
def test_a_client_ref_splits_as_it_parses(text: str) -> None:
    """The router splits every publication's ref without the record: the same parts."""
    ref = ClientRef.parse(text)
    assert ClientRef.split(text) == (ref.name, ref.session)
    assert str(ref) == text.rstrip("@")


def test_a_publication_id_has_the_same_text_without_the_record() -> None:
    record = PublicationId("B1", "a/b", "7", "18f3a")
    assert PublicationId.text("B1", "a/b", "7", "18f3a") == str(record) == "B1/a/b/7@18f3a"
