"""A site's routing state applied from its log: every member computes the same, each sends its
share, and a hop that moves between members takes its session with it."""

from __future__ import annotations

import random

import pytest

from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, Deliver, LinkDown, LinkUp, Publish, Subscribe, Tick, Took
from broker.routing.router import Output, Router
from broker.sites import Input, MemberDown, SiteState, decode_input, encode_input

STOCK = parse_filter("[class,eq,stock]")


def member_state() -> SiteState:
    return SiteState(Router("S1", session_grace=60))


def entry(member: str, hop: str, now: float, message: object) -> bytes:
    return encode_input(Input(member, hop, now, message))  # type: ignore[arg-type]


def delivered(output: Output) -> list[tuple[str, int]]:
    return [
        (target, m.message.publication["n"])  # type: ignore[union-attr]
        for target, m in output
        if isinstance(m, Carry) and isinstance(m.message, Deliver)
    ]


SCRIPT = [
    entry("b1", "pub", 1.0, LinkUp(False)),
    entry("b2", "sub", 1.0, LinkUp(False)),
    entry("b1", "pub", 2.0, Advertise("a1", parse_filter("[class,eq,stock],[n,>,-1]"))),
    entry("b2", "sub", 3.0, Subscribe("s1", STOCK)),
    entry("b1", "pub", 4.0, Publish("1", Publication("stock", {"n": 1}))),
    entry("b1", "pub", 5.0, Publish("2", Publication("stock", {"n": 2}))),
]


@pytest.mark.parametrize(
    "message",
    [
        LinkUp(True, epoch="S2-1", resume=7, identity="S2", role="broker", name="c"),
        LinkDown(),
        Tick(),
        MemberDown("b3"),
        Publish("1", Publication("stock", {"n": 1}), ttl=5, ack=True, time=1.5),
        Took(9),
    ],
    ids=lambda m: type(m).__name__,
)
def test_an_input_is_the_same_after_the_log(message: object) -> None:
    item = Input("b1", "c1", 12.5, message)  # type: ignore[arg-type]
    assert decode_input(encode_input(item)) == item


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x95\xa2b1\xa2c1\xcb@)\x00\x00\x00\x00\x00\x00\xa4wire\xc4\x01\x00", "must be an array"),
        (b"\x95\xa2b1\xa2c1\x01\xa4what\xc0", "unknown input 'what'"),
        (b"\x95\x01\xa2c1\x01\xa4tick\xc0", "member, hop and time must be"),
        (b"\xc1", "not a site input"),
    ],
)
def test_an_entry_that_is_not_an_input_is_refused_in_one_line(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as refused:
        decode_input(data)
    assert str(refused.value).startswith("not a site input: ") and "\n" not in str(refused.value)


def test_every_member_computes_the_same_and_each_sends_its_share() -> None:
    members = {name: member_state() for name in ("b1", "b2", "b3")}
    outputs = {name: [state.apply(e) for e in SCRIPT] for name, state in members.items()}
    assert outputs["b1"] == outputs["b2"] == outputs["b3"]
    statuses = [state.router.status(detail=True) for state in members.values()]
    assert statuses[0] == statuses[1] == statuses[2]
    last = outputs["b1"][-1]
    assert delivered(last) == [("sub", 2)]
    mine = {name: state.mine(last, name) for name, state in members.items()}
    assert delivered(mine["b2"]) == [("sub", 2)]  # the subscriber's member delivers it
    assert [(target, type(m).__name__) for target, m in mine["b1"]] == [("pub", "Ack")]  # the publisher's
    assert mine["b3"] == []  # no hop of the site is attached to b3


def test_a_client_that_moves_to_another_member_keeps_its_session_and_the_old_member_goes_quiet() -> None:
    state = member_state()
    for e in SCRIPT[:4]:
        state.apply(e)
    state.apply(entry("b3", "sub", 6.0, LinkUp(False, resume=0)))  # sub failed over to b3
    assert state.attached["sub"] == "b3"
    assert state.apply(entry("b2", "sub", 6.5, LinkDown())) == []  # b2 saw its link close: stale
    assert state.apply(entry("b2", "sub", 6.6, Subscribe("late", STOCK))) == []  # read off the old link
    assert state.stale == 2 and state.router.counters["site.stale_inputs"] == 2
    out = state.apply(entry("b1", "pub", 7.0, Publish("3", Publication("stock", {"n": 3}))))
    assert delivered(state.mine(out, "b3")) == [("sub", 3)] and delivered(state.mine(out, "b2")) == []
    assert "late" not in str(state.router.status(detail=True)["prt"])


def test_the_hops_of_a_member_that_is_gone_go_down_with_it() -> None:
    state = member_state()
    for e in SCRIPT[:4]:
        state.apply(e)
    state.apply(entry("b1", "", 8.0, MemberDown("b2")))
    assert "sub" not in state.attached and state.attached == {"pub": "b1"}
    assert state.router.status()["away"] == ["sub"]  # its session waits out its grace period


def test_a_bad_entry_is_counted_and_skipped_alike_on_every_member() -> None:
    state = member_state()
    assert state.apply(b"\x00") == []
    assert state.router.counters["site.bad_entries"] == 1


def test_members_fed_a_random_interleaving_of_attachments_agree() -> None:
    """Whatever the order the log gives inputs of hops moving between members, the members
    applying it agree on everything (the log is the only order there is)."""
    rng = random.Random(5)
    log: list[bytes] = []
    now = 1.0
    for step in range(300):
        now += 0.1
        member, hop = rng.choice(("b1", "b2", "b3")), rng.choice(("c1", "c2", "c3"))
        message = rng.choice(
            [
                LinkUp(False, resume=0),
                LinkDown(),
                Subscribe(f"s{step}", STOCK),
                Advertise(f"a{step}", parse_filter("[class,eq,stock],[n,>,-1]")),
                Publish(str(step), Publication("stock", {"n": step})),
            ]
        )
        log.append(entry(member, hop, now, message))
    members = [member_state() for _ in range(3)]
    outputs = [[state.apply(e) for e in log] for state in members]
    assert outputs[0] == outputs[1] == outputs[2]
    assert members[0].attached == members[1].attached == members[2].attached
    assert members[0].router.status(detail=True) == members[2].router.status(detail=True)


def test_a_snapshot_restores_the_same_state_and_refuses_what_a_broker_did_not_write() -> None:
    import pickle

    site = SiteState(Router("S"))
    site.take(Input("b1", "c1", 1.0, LinkUp(False, resume=0)))
    site.take(Input("b1", "c1", 1.0, Subscribe("s1", parse_filter("[class,eq,t]"))))
    copy = SiteState(Router("S"))
    copy.restore(site.snapshot())
    assert copy.attached == {"c1": "b1"}
    assert copy.router.status()["subscriptions"] == site.router.status()["subscriptions"] == 1
    assert copy.router.status(detail=True)["prt"] == site.router.status(detail=True)["prt"]

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("owned",))

    with pytest.raises(ValueError, match=r"holds no builtins\.print"):
        copy.restore(pickle.dumps((11, Evil())))
    with pytest.raises(ValueError, match="not a router's state"):
        copy.restore(b"not a pickle")
