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
from tests.consensus.seeds import batch_id, batches, run_batch

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


ROUTING = 200  # seeds of the routing state's chaos, in batches (as ``tests/consensus``' seeds)


def routing_chaos(seed: int, compact_every: int = 0) -> SiteSim:
    """One seed: 6 s of chaos with the clients' inputs, then the faults stop; the site must agree
    (every member that applied an entry computed the same output), and every member must hold
    the same routing tables, sessions, custody and clients attached."""
    site = SiteSim(
        3, seed, loss=0.05, duplicates=0.05, sudden=0.02, machines=machine, compact_every=compact_every
    )
    site.chaos(6, make=inputs(seed))  # type: ignore[arg-type]
    site.settle()
    site.check_converged()  # the outputs of every entry were the same on every member that applied it
    replicas = [b.machine for b in site.brokers.values()]
    states = [r.router.status(detail=True) for r in replicas]  # type: ignore[union-attr]
    assert states[0] == states[1] == states[2], "the members' routing states differ"
    assert replicas[0].attached == replicas[1].attached == replicas[2].attached, (  # type: ignore[union-attr]
        "the members' clients attached differ"
    )
    return site


def delivered(site: SiteSim) -> list[Deliver]:
    """The publications the site routed to subscribers."""
    return [
        m.message
        for output in site.outputs.values()
        for _, m in output  # type: ignore[attr-defined]
        if isinstance(m, Carry) and isinstance(m.message, Deliver)
    ]


def compact_every(seed: int) -> int:
    """Every other seed, the members compact their logs."""
    return 10 if seed % 2 else 0


def replay(seed: int) -> str:
    """The command, at the project's root, that replays the seed of a batch exactly."""
    return (
        'python -c "from tests.sites.test_replicated import routing_chaos; '
        f'routing_chaos({seed}, {compact_every(seed)})"'
    )


def stalled(site: SiteSim) -> str | None:
    """Why a run did too little to have tested much (as the tests of single seeds ask): nothing
    delivered; compacting, no log compacted."""
    if site.compact_every:
        return None if site.compactions > 0 else "no compaction"
    return None if delivered(site) else "nothing delivered"


@pytest.mark.parametrize("seed", range(6))
def test_every_member_of_a_site_holds_the_same_routing_state_through_chaos(seed: int) -> None:
    site = routing_chaos(seed)
    assert delivered(site)  # the site routed publications to subscribers, under the faults


@pytest.mark.parametrize("seed", range(4))
def test_members_that_compact_their_logs_hold_the_same_routing_state_through_chaos(seed: int) -> None:
    """Members compact their logs into their state's snapshots; one behind is restored from the
    leader's, and computes what the others compute from there on."""
    site = routing_chaos(seed, compact_every=10)
    assert site.compactions > 0


@pytest.mark.parametrize("seeds", batches(ROUTING), ids=batch_id)
def test_members_hold_the_same_routing_state_through_chaos_seed_after_seed(seeds: range) -> None:
    """Many seeds of the above, every other one compacting: each must agree, most must route."""
    run_batch(seeds, lambda seed: routing_chaos(seed, compact_every(seed)), replay, stalled)


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
