"""The site's replicated log: a long seeded fault campaign, and the failover gap.

1. Campaign: ``--seeds`` sites of three brokers (and a fifth as many of five) under chaos
   (crashes, sudden crashes right after a write, freezes, partitions, 5 % loss and duplicates,
   reordering), every step checked (``broker.sim.site``): the figure is the violations, which
   must be 0, beside the entries acknowledged. Every other seed, the members compact their logs
   (on average every ``--compact-every`` entries applied), so members behind are caught up by
   snapshots: the compactions and the snapshots installed are counted.
2. Failover gap, in the simulator's virtual time: a client proposes every 10 ms; the leader is
   killed; the gap is the time from the last entry acknowledged before the kill to the first
   after it. Baseline: the election timeout (a follower waits one to two of them before it
   stands), so the ratio says how much of the gap is the wait the protocol asks for.

Usage: python benchmarks/sites.py [--seeds 500] [--compact-every 10]. Prints one RESULT line per
figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from broker.sim.site import SiteSim, Violation

ELECTION_TIMEOUT = 0.3


def campaign(seeds: int, members: int, compact_every: int) -> dict[str, object]:
    violations, acknowledged, started = [], 0, time.perf_counter()
    compactions = installed = 0
    for seed in range(seeds):
        site = SiteSim(
            members,
            seed,
            loss=0.05,
            duplicates=0.05,
            sudden=0.02,
            election_timeout=ELECTION_TIMEOUT,
            compact_every=compact_every if seed % 2 else 0,
        )
        try:
            site.chaos(8)
            site.settle()
            site.check_converged()
        except Violation as error:
            violations.append(f"seed {seed}: {error}")
        acknowledged += len(site.acknowledged)
        compactions += site.compactions
        installed += sum(b.installed for b in site.brokers.values())
    return {
        "benchmark": f"sites-campaign-{members}",
        "seeds": seeds,
        "violations": len(violations),
        "first_violations": violations[:3],
        "acknowledged": acknowledged,
        "compactions": compactions,
        "snapshots_installed": installed,
        "seconds": round(time.perf_counter() - started, 1),
    }


def failover_gap(seed: int) -> float:
    site = SiteSim(3, seed, election_timeout=ELECTION_TIMEOUT, heartbeat=0.05)
    site.run(2)
    step, last_ack, killed = 0.01, 0.0, None
    for number in range(400):
        before = len(site.acknowledged)
        site.propose(b"%d" % number)
        site.run(step)
        if len(site.acknowledged) > before:
            if killed is not None:
                return site.now - last_ack
            last_ack = site.now
        if number == 100:
            leader = site.leader()
            assert leader is not None
            site.crash(leader)
            killed = site.now
    raise AssertionError(f"seed {seed}: nothing acknowledged within 3 s of the leader's death")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--compact-every", type=int, default=10, help="0: the logs are never compacted")
    arguments = parser.parse_args()
    seeds = arguments.seeds
    cores = os.cpu_count()
    for members, count in ((3, seeds), (5, max(1, seeds // 5))):
        result = campaign(count, members, arguments.compact_every)
        print("RESULT " + json.dumps({**result, "cores": cores}), flush=True)
    gaps = sorted(failover_gap(seed) for seed in range(200))
    p99 = gaps[int(len(gaps) * 0.99) - 1]
    line = {
        "benchmark": "sites-failover-gap",
        "runs": len(gaps),
        "p50_s": round(statistics.median(gaps), 3),
        "p99_s": round(p99, 3),
        "max_s": round(gaps[-1], 3),
        "baseline_election_timeout_s": ELECTION_TIMEOUT,
        "ratio_p99": round(p99 / ELECTION_TIMEOUT, 2),
        "cores": cores,
    }
    print("RESULT " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
