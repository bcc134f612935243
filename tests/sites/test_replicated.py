"""A site's routing state replicated by its log under the simulator's chaos: every member that
applies an entry computes the same output, and after the faults every member holds the same
routing tables, sessions and custody."""

from __future__ import annotations

import random

import pytest

from broker.language import Publication, parse_filter
from broker.messages import Advertise, Carry, Deliver, LinkDown, LinkUp, Publish, Subscribe
from broker.routing.router import Router
from broker.sim.site import SiteSim
from broker.sites import Input, SiteState, encode_input

STOCK = parse_filter("[class,eq,stock]")


def machine() -> SiteState:  # the simulator's ``Machine``: snapshot and restore its own
    return SiteState(Router("S1", session_grace=60))


def inputs(seed: int) -> object:
    """The n-th input a member proposes: clients subscribe, advertise and publish through the
    member they are attached to, and now and then move to another member or go."""
    rng = random.Random(seed)
    where: dict[str, str] = {}  # hop -> the member it was last attached through

    def make(number: int) -> bytes:
        hop = rng.choice(("c1", "c2", "c3"))
        roll = rng.random()
        if hop not in where or roll < 0.05:  # arrives, or moves to another member
            where[hop] = rng.choice(("b1", "b2", "b3"))
            message: object = LinkUp(False, resume=0)
        elif roll < 0.08:
            message = LinkDown()
            member = where.pop(hop)
            return encode_input(Input(member, hop, float(number), message))  # type: ignore[arg-type]
        else:
            message = rng.choice(
                [
                    Subscribe(f"s{number}", STOCK),
                    Advertise(f"a{number}", parse_filter("[class,eq,stock],[n,>,-1]")),
                    Publish(str(number), Publication("stock", {"n": number})),
                    Publish(str(number), Publication("stock", {"n": number})),
                ]
            )
        return encode_input(Input(where[hop], hop, float(number), message))  # type: ignore[arg-type]

    return make


@pytest.mark.parametrize("seed", range(6))
def test_every_member_of_a_site_holds_the_same_routing_state_through_chaos(seed: int) -> None:
    site = SiteSim(3, seed, loss=0.05, duplicates=0.05, sudden=0.02, machines=machine)
    site.chaos(6, make=inputs(seed))  # type: ignore[arg-type]
    site.settle()
    site.check_converged()  # the outputs of every entry were the same on every member that applied it
    states = [b.machine.router.status(detail=True) for b in site.brokers.values()]  # type: ignore[union-attr]
    assert states[0] == states[1] == states[2]
    attachments = [b.machine.attached for b in site.brokers.values()]  # type: ignore[union-attr]
    assert attachments[0] == attachments[1] == attachments[2]
    delivered = [
        m
        for output in site.outputs.values()
        for _, m in output  # type: ignore[attr-defined]
        if isinstance(m, Carry) and isinstance(m.message, Deliver)
    ]
    assert delivered  # the site routed publications to subscribers, under the faults


@pytest.mark.parametrize("seed", range(4))
def test_members_that_compact_their_logs_hold_the_same_routing_state_through_chaos(seed: int) -> None:
    """Members compact their logs into their state's snapshots; one behind is restored from the
    leader's, and computes what the others compute from there on."""
    site = SiteSim(3, seed, loss=0.05, duplicates=0.05, sudden=0.02, machines=machine, compact_every=10)
    site.chaos(6, make=inputs(seed))  # type: ignore[arg-type]
    site.settle()
    site.check_converged()
    assert site.compactions > 0
    replicas = [b.machine for b in site.brokers.values()]
    states = [r.router.status(detail=True) for r in replicas]  # type: ignore[union-attr]
    assert states[0] == states[1] == states[2]
    assert replicas[0].attached == replicas[1].attached == replicas[2].attached  # type: ignore[union-attr]


def test_a_member_down_past_the_compaction_point_is_restored_from_the_leader_s_state() -> None:
    site = SiteSim(3, 2, machines=machine, compact_every=5)
    site.run(2)
    victim = next(name for name in sorted(site.brokers) if name != site.leader())
    site.crash(victim)
    make = inputs(2)
    for number in range(1, 80):
        site.propose(make(number))  # type: ignore[operator]
        site.run(0.01)
    site.restart(victim)
    site.settle()
    site.check_converged()
    assert site.brokers[victim].installed >= 1
    states = [b.machine.router.status(detail=True) for b in site.brokers.values()]  # type: ignore[union-attr]
    assert states[0] == states[1] == states[2]


def test_a_member_that_computes_otherwise_is_caught() -> None:
    """The checker's side: a member whose state machine is not the others' (here, a router with
    another id) gives another output for the same entry."""
    names = iter(["S1", "S1", "S2", "S1", "S2", "S2"] + ["S1"] * 100)
    site = SiteSim(3, 1, machines=lambda: SiteState(Router(next(names))))
    site.run(2)
    make = inputs(1)
    from broker.sim.site import Violation

    with pytest.raises(Violation, match="computed another output for entry"):
        for number in range(1, 60):
            site.propose(make(number))  # type: ignore[operator]
            site.run(0.05)
