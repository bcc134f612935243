"""The site's replicated log: a long seeded fault campaign, and the failover gap.

1. Campaign: ``--seeds`` sites of three brokers (and a fifth as many of five) under chaos
   (crashes, sudden crashes right after a write, freezes, partitions, 5 % loss and duplicates,
   reordering), every step checked: the campaign of the suite (``broker.sim.site.campaign`` and
   ``play``, every other seed compacting its logs), on other seeds (from ``--first-seed``: the
   suite's start at 0) and far more of them than the suite runs (the baseline: its
   ``tests/consensus/test_simulation.py`` counts), over ``--jobs`` processes. The figure is the
   violations, which must be 0 (the benchmark exits 1 otherwise, each failing seed named with
   the command that replays it), beside the entries acknowledged, the compactions and the
   snapshots installed.
2. Failover gap, in the simulator's virtual time: a client proposes every 10 ms; the leader is
   killed; the gap is the time from the last entry acknowledged before the kill to the first
   after it. Baseline: the election timeout (a follower waits one to two of them before it
   stands), so the ratio says how much of the gap is the wait the protocol asks for.

Usage: python benchmarks/sites.py [--seeds 4000] [--first-seed 100000] [--jobs N]. Prints one
RESULT line per figure, with the cores and the load average (1 minute) before and after.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suite's counts, from tests/

from broker.sim.site import SiteSim, campaign, play, replay_command
from tests.consensus.test_simulation import COMPACT_EVERY, FIVE, THREE

ELECTION_TIMEOUT = 0.3


def batch(members: int, seeds: range) -> dict[str, Any]:
    """Play the suite's campaign on ``seeds``: the violations (with the command that replays
    each) and the work done."""
    found: list[str] = []
    acknowledged = compactions = installed = 0
    for seed in seeds:
        compact = COMPACT_EVERY if seed % 2 else 0
        site = campaign(seed, members, compact)
        try:
            play(site)
        except Exception as error:  # a Violation, or an error of the code under test: as the suite
            replay = replay_command(seed, members, compact)
            found.append(f"seed {seed}: {type(error).__name__}: {error} (replay: {replay})")
        acknowledged += len(site.acknowledged)
        compactions += site.compactions
        installed += sum(b.installed for b in site.brokers.values())
    return {
        "violations": found,
        "acknowledged": acknowledged,
        "compactions": compactions,
        "installed": installed,
    }


def sweep(seeds: int, first: int, members: int, jobs: int, suite: int) -> dict[str, object]:
    """``seeds`` seeds from ``first``, in batches of 50 over ``jobs`` processes."""
    started, load = time.perf_counter(), os.getloadavg()[0]
    batches = [range(s, min(s + 50, first + seeds)) for s in range(first, first + seeds, 50)]
    with ProcessPoolExecutor(jobs, mp.get_context("spawn")) as pool:
        results = list(pool.map(batch, [members] * len(batches), batches))
    violations = [v for r in results for v in r["violations"]]
    return {
        "benchmark": f"sites-campaign-{members}",
        "seeds": seeds,
        "first_seed": first,
        "violations": len(violations),
        "first_violations": violations[:3],
        "baseline_suite_seeds": suite,
        "ratio_vs_suite": round(seeds / suite, 1),
        "acknowledged": sum(r["acknowledged"] for r in results),
        "compactions": sum(r["compactions"] for r in results),
        "snapshots_installed": sum(r["installed"] for r in results),
        "seconds": round(time.perf_counter() - started, 1),
        "jobs": jobs,
        "load_before": round(load, 1),
        "load": round(os.getloadavg()[0], 1),
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
    parser.add_argument(
        "--seeds", type=int, default=4000, help="sites of three (and a fifth as many of five)"
    )
    parser.add_argument("--first-seed", type=int, default=100_000, help="the suite runs seeds from 0")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    arguments = parser.parse_args()
    seeds, cores = arguments.seeds, os.cpu_count()
    violations = 0
    for members, count, suite in ((3, seeds, THREE), (5, max(1, seeds // 5), FIVE)):
        result = sweep(count, arguments.first_seed, members, arguments.jobs, suite)
        violations += int(str(result["violations"]))
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
    if violations:
        sys.exit(f"{violations} seeds broke the log: see first_violations above")


if __name__ == "__main__":
    main()
