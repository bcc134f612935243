"""The handshake without I/O: what a hello must say on each side, and who may say it."""

from __future__ import annotations

import pytest

from broker.errors import BadMessage, LinkClosed, ProtocolError
from broker.messages import Hello, Ping, Refuse, Unsubscribe
from broker.transport.handshake import (
    Misconfigured,
    ServedElsewhere,
    answer,
    elsewhere,
    impostor,
    not_the_broker,
    opening,
    unanswered,
    unreached,
)
from broker.transport.tls import Peer
from broker.transport.uri import BrokerURI

B1 = BrokerURI("127.0.0.1", 7000, "B1")
PIPELINED = Unsubscribe("s1")


def test_the_listener_takes_the_hello_and_what_was_pipelined_behind_it() -> None:
    hello = Hello("client", "c")
    assert opening([hello, Ping(), PIPELINED]) == (hello, [Ping(), PIPELINED])


@pytest.mark.parametrize("first", [Ping(), BadMessage("not msgpack"), Refuse("", "no")])
def test_a_first_frame_that_is_not_a_hello_fails_the_handshake(first: object) -> None:
    with pytest.raises(ProtocolError, match=r"^expected hello, got "):
        opening([first])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (
            Refuse("", "client id 'c' is already connected"),
            "refused the connection: client id 'c' is already",
        ),
        (Hello("broker", "B2"), "answered as broker 'B2', not broker 'B1'"),
        (Hello("client", "B1"), "answered as client 'B1', not broker 'B1'"),
        (Ping(), r"answered as Ping\(\), not broker 'B1'"),
    ],
)
def test_the_dialler_takes_only_the_broker_it_dialled(first: object, reason: str) -> None:
    with pytest.raises(Misconfigured, match=reason):
        answer(B1, [first])  # type: ignore[list-item]


def test_the_dialler_takes_the_answer_and_what_came_behind_it() -> None:
    hello = Hello("broker", "B1", epoch="e:1")
    assert answer(B1, [hello, PIPELINED]) == (hello, [PIPELINED])
    with pytest.raises(BadMessage):
        answer(B1, [BadMessage("garbage")])


@pytest.mark.parametrize(
    ("leader", "named"),
    [("B2", "B2"), ("B1", "B1"), (None, ""), ("", "")],  # another, itself (elected), none known
)
def test_a_broker_of_a_site_that_sends_us_on_names_its_leader(leader: str | None, named: str) -> None:
    """So that the dialler goes to the leader next, at once (``dial_any``, ``_keep_linked``)."""
    reason = elsewhere("B1", "S", leader)
    with pytest.raises(ServedElsewhere, match="B1 does not serve site S") as refused:
        answer(B1, [Refuse("", reason)])
    assert refused.value.leader == named
    assert isinstance(refused.value, ServedElsewhere) and not isinstance(refused.value, Misconfigured)


@pytest.mark.parametrize(
    ("hello", "who", "allowed"),
    [
        (Hello("broker", "B1"), Peer("B1", "broker"), True),
        (Hello("broker", "B1"), Peer("B1", "client"), False),
        (Hello("broker", "B1"), Peer("B2", "broker"), False),
        (Hello("client", "alice"), Peer("alice", "client"), True),
        (Hello("client", "alice:pub"), Peer("alice", "client"), True),
        (Hello("client", "bob"), Peer("alice", "client"), False),
        (Hello("client", "alicex"), Peer("alice", "client"), False),
    ],
)
def test_a_hello_may_claim_no_more_than_the_certificate(hello: Hello, who: Peer, allowed: bool) -> None:
    assert (impostor(hello, who) == "") is allowed


def test_a_dialled_broker_must_show_its_own_broker_certificate() -> None:
    assert not_the_broker(B1, Peer("B1", "broker")) == ""
    assert not_the_broker(B1, Peer("B1", "client")) == (
        "socket://127.0.0.1:7000/B1's certificate is B1 (role client), not broker B1's"
    )


def test_failures_are_explained_for_someone_who_can_act_on_them() -> None:
    assert "is the host up" in unreached(TimeoutError(), 2, in_tls=False)
    assert "no answer to the TLS handshake within 2 s" in unreached(TimeoutError(), 2, in_tls=True)
    assert unreached(ConnectionRefusedError("refused"), 2, in_tls=False) == "refused"
    assert "give --tls and --identity" in unanswered(LinkClosed("closed by peer"), 2, tls=False)
    assert "did not accept our certificate" in unanswered(LinkClosed("closed by peer"), 2, tls=True)
    assert "not a wfm frame" in unanswered(ProtocolError("bad"), 2, tls=False)
