"""The client's request bookkeeping on its own: no broker, no event loop, no clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.client.requests import Refs, Requests
from broker.language import parse_filter, parse_publication
from broker.messages import (
    CLIENT_SESSION_DIGITS,
    Advertise,
    ClientRef,
    OverlayId,
    Publish,
    StatusRequest,
    Subscribe,
    Unsubscribe,
    client_session,
)

FILTER = parse_filter("[class,eq,a]")


@dataclass
class Sub:
    id: str = ""


Book = Requests[str, Sub]


def subscribed(book: Book, ref: str = "1") -> tuple[Sub, Subscribe]:
    sub, message = Sub(), Subscribe(ref, FILTER)
    book.make(ref, message, sub)
    book.sent(ref, message, "waiter")
    return sub, message


def acknowledged() -> Book:
    """A book with one subscription, ref 1, acknowledged as B1/c/1."""
    book: Book = Requests()
    subscribed(book)
    book.acknowledged("1", "B1/c/1")
    book.answered("1")
    return book


def test_a_subscription_keeps_its_first_id_and_is_found_by_its_current_one() -> None:
    book: Book = Requests()
    sub, message = subscribed(book)
    assert book.acknowledged("1", "B1/c/1") == "B1/c/1" and book.answered("1") is not None
    assert sub.id == "B1/c/1" and book.subscriptions == {"B1/c/1": sub}
    assert book.subscription("B1/c/1") is sub and book.name_of("B1/c/1") == "1"
    assert book.to_send() == ([message], [])  # made in an earlier session: goes again
    assert book.acknowledged("1", "B2/c/1") == "B1/c/1"  # another broker's id, after a failover
    assert book.subscription("B2/c/1") is sub and book.subscription("B1/c/1") is None
    assert sub.id == "B1/c/1"


def test_a_request_not_acknowledged_yet_goes_again_as_pending_only() -> None:
    book: Book = Requests()
    _, message = subscribed(book)
    status = StatusRequest("2")
    book.sent("2", status, None)
    assert book.to_send() == ([], [message, status])


def test_publications_are_counted_until_answered() -> None:
    book: Book = Requests()
    book.sent("1@s", Publish("1@s", parse_publication("[class,a]")), None)
    assert book.unacked == 1
    answered = book.answered("1@s")
    assert answered is not None and answered.waiter is None and book.unacked == 0
    assert book.answered("1@s") is None


def test_a_withdrawal_forgets_the_request_and_a_lost_link_ends_it() -> None:
    book = acknowledged()
    live = book.withdraw("B1/c/1")
    assert live is not None and live.current == "B1/c/1" and book.live == {}
    book.sent("B1/c/1", Unsubscribe("B1/c/1"), "withdrawing")
    book.sent("2", Advertise("2", FILTER), "advertising")
    assert book.lost() == ["withdrawing"] and list(book.pending) == ["2"]
    book.withdrawn("B1/c/1", "B1/c/1")
    assert book.subscriptions == {} and book.subscription("B1/c/1") is None
    assert book.withdraw("B1/c/1") is None


def test_a_refused_request_is_no_longer_live() -> None:
    book = acknowledged()
    book.refused("1")
    assert book.live == {} and book.name_of("B1/c/1") is None


def test_a_request_given_up_registers_nothing_when_its_ack_comes_late() -> None:
    book: Book = Requests()
    sub, _ = subscribed(book)
    book.answered("1")
    book.forget("1")
    assert book.acknowledged("1", "B1/c/1") == "B1/c/1" and sub.id == "" and book.subscriptions == {}


def test_the_end_hands_back_every_waiter_and_the_publications_never_acknowledged() -> None:
    book: Book = Requests()
    subscribed(book)
    book.sent("2@s", Publish("2@s", parse_publication("[class,a]")), None)
    assert book.end() == (["waiter"], 1)
    assert book.pending == {} and book.unacked == 0


@pytest.mark.parametrize(
    ("text", "ref"),
    [("7", ClientRef("7")), ("kfeed", ClientRef("kfeed")), ("3@18c0ffee000", ClientRef("3", "18c0ffee000"))],
)
def test_a_client_ref_reads_back_what_it_printed(text: str, ref: ClientRef) -> None:
    assert ClientRef.parse(text) == ref and str(ref) == text


def test_a_session_the_client_named_is_told_from_a_brokers_stamp() -> None:
    session = client_session(1.0, 0xABCDEF)
    assert len(session) == CLIENT_SESSION_DIGITS and ClientRef("3", session).named_by_client
    assert not ClientRef("3", "18c0ffee000").named_by_client and not ClientRef("3").named_by_client
    assert ClientRef.parse(f"12@{session}").number == 12
    assert OverlayId.parse(f"B1/c/12@{session}") == OverlayId("B1", "c", "12")


def test_refs_count_take_names_and_print_a_publications_session() -> None:
    refs = Refs(7, "s" * CLIENT_SESSION_DIGITS, "v" * CLIENT_SESSION_DIGITS)
    assert refs.next() == "7" and refs.next("acks") == "acks"
    assert refs.publication() == f"8@{'s' * CLIENT_SESSION_DIGITS}"
    assert ClientRef.parse(refs.publication(durable=False)) == ClientRef("9", "v" * CLIENT_SESSION_DIGITS)


@pytest.mark.parametrize("name", ["", "12", "a/b", "a@b", "a b"])
def test_a_request_name_is_no_number_and_has_no_separator(name: str) -> None:
    with pytest.raises(ValueError, match="a request name"):
        Refs(1, "", "").next(name)
