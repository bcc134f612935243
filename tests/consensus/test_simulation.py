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
