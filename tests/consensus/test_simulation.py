"""A site's log under seeded chaos (crashes, sudden crashes right after a write, freezes,
partitions, lost, duplicated and reordered messages), checked at every step; and the checker
itself, shown each anomaly it reports."""

from __future__ import annotations

import pytest

from broker.consensus import Entry
from broker.sim.site import SiteSim, Violation

SEEDS = range(24)  # more in benchmarks/sites.py


@pytest.mark.parametrize("seed", SEEDS)
def test_a_site_of_three_keeps_one_log_under_chaos(seed: int) -> None:
    site = SiteSim(3, seed, loss=0.05, duplicates=0.05, sudden=0.02)
    site.chaos(8)
    site.settle()
    site.check_converged()
    assert len(site.acknowledged) >= 10  # the site made progress under the faults


@pytest.mark.parametrize("seed", range(6))
def test_a_site_of_five_keeps_one_log_under_chaos(seed: int) -> None:
    site = SiteSim(5, seed, loss=0.05, duplicates=0.05, sudden=0.02)
    site.chaos(8)
    site.settle()
    site.check_converged()


@pytest.mark.parametrize(("members", "seed"), [(3, s) for s in range(12)] + [(5, s) for s in range(4)])
def test_a_site_that_compacts_its_logs_keeps_one_log_under_chaos(members: int, seed: int) -> None:
    """Every member compacts its log at random points; members that were down or cut off are
    caught up by snapshots; the state machines (hash chains) agree after each entry."""
    site = SiteSim(members, seed, loss=0.05, duplicates=0.05, sudden=0.02, compact_every=10)
    site.chaos(8)
    site.settle()
    site.check_converged()
    assert site.compactions >= members
    assert all(b.node and b.node.log.first_index > 1 for b in site.brokers.values())


def behind(seed: int = 3) -> tuple[SiteSim, str]:
    """A site whose member was down while the others took and compacted many entries."""
    site = SiteSim(3, seed, compact_every=5)
    site.run(2)
    victim = next(name for name in sorted(site.brokers) if name != site.leader())
    site.crash(victim)
    for number in range(100):
        site.propose(b"%d" % number)
        site.run(0.01)
    return site, victim


def test_a_member_down_past_the_compaction_point_is_caught_up_by_a_snapshot() -> None:
    site, victim = behind()
    leader = site.brokers[site.leader() or ""].node
    assert leader is not None and leader.log.first_index > 2  # what the victim lacks is gone
    site.restart(victim)
    site.settle()
    site.check_converged()
    assert site.snapshots_sent >= 1 and site.brokers[victim].installed >= 1
    node = site.brokers[victim].node
    assert node is not None and node.snapshot is not None and node.log.first_index > 2


def test_the_checker_reports_a_snapshot_installed_that_no_one_took() -> None:
    site, victim = behind()
    site.snapshots.clear()
    site.restart(victim)
    with pytest.raises(
        Violation, match=rf"{victim} installed a snapshot of entry \d+ that no one took there"
    ):
        site.settle()


def test_the_checker_reports_a_snapshot_installed_behind_what_was_applied() -> None:
    site, victim = behind()
    site.restart(victim)
    site.brokers[victim].applied = 10_000
    site.brokers[victim].compact_at = 20_000
    with pytest.raises(Violation, match=rf"{victim} installed snapshot \d+ after applying 10000"):
        site.settle()


def test_a_site_keeps_serving_when_its_leader_is_killed() -> None:
    site = SiteSim(3, seed=7)
    site.run(2)
    first = site.leader()
    assert first is not None and site.propose(b"before") is not None
    site.run(0.2)
    site.crash(first)
    site.run(1.5)  # a new election: at most twice the election timeout, plus a round
    second = site.leader()
    assert second not in (None, first)
    assert site.propose(b"after") is not None
    site.settle()
    site.check_converged()
    assert [e.data for e in site.applied.values() if e.data] == [b"before", b"after", b"settled"]


def test_the_checker_reports_two_leaders_in_one_term() -> None:
    site = SiteSim(3, seed=1)
    site.run(2)
    leader = site.leader()
    assert leader is not None
    other = next(name for name in site.brokers if name != leader)
    site.leaders[site.brokers[leader].node.term] = other  # type: ignore[union-attr]
    with pytest.raises(Violation, match="two leaders in term 1"):
        site.propose(b"x")


def test_the_checker_reports_two_entries_applied_at_one_index() -> None:
    site = SiteSim(3, seed=1)
    site.run(2)
    site.applied[2] = Entry(1, 2, b"elsewhere")
    site.propose(b"here")
    with pytest.raises(Violation, match=r"applied Entry\(term=1, index=2, data=b'here'\) where another"):
        site.run(1)


def test_the_checker_reports_an_acknowledged_entry_lost() -> None:
    site = SiteSim(3, seed=1)
    site.run(2)
    site.propose(b"kept")
    site.run(1)
    site.acknowledged[2] = b"promised"
    with pytest.raises(Violation, match="acknowledged entry 2 was lost"):
        site.check_converged()


def test_the_checker_reports_a_broker_left_behind() -> None:
    site = SiteSim(3, seed=1)
    site.run(2)
    site.brokers["b1"].applied = 0
    with pytest.raises(Violation, match="b1 applied up to 0, the site up to 1"):
        site.check_converged()
