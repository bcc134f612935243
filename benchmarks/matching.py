"""Matching throughput on the PADRES paper's workload, against a linear scan measured in the same run.

Workload "ranges": publications carry a class out of 10 and 20 numeric attributes (0..1000); each
subscription has its class and 4 one-sided range predicates on distinct random attributes, each
about 30% of the domain. Workload "mixed": the same, but half the attributes are strings and the
predicates on them are ``eq`` or ``str-prefix``.

Prints a table, then one result line: the figure (ms per publication at the largest size), the
baseline (linear scan), their ratio, and the core count. ``--quick`` runs small sizes only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import tracemalloc
from collections.abc import Callable

from broker.language import Filter, Predicate, Publication
from broker.matching import CountingMatcher, LinearMatcher

CLASSES = [f"c{i}" for i in range(10)]
LETTERS = "abcd"
WORDS = [a + b + c for a in LETTERS for b in LETTERS for c in LETTERS]
NOW = 1_800_000_000.0  # the instant of every match: these workloads have no time predicates


def attribute_names(mixed: bool) -> list[tuple[str, bool]]:
    """(name, is_string) for the 20 attributes of a publication."""
    return [(f"s{i}", True) if mixed and i % 2 else (f"a{i}", False) for i in range(20)]


def make_subscription(rng: random.Random, mixed: bool) -> Filter:
    predicates = []
    for name, is_string in rng.sample(attribute_names(mixed), 4):
        if is_string:
            word = rng.choice(WORDS)
            predicates.append(
                Predicate(name, "eq", word) if rng.random() < 0.5 else Predicate(name, "str-prefix", word[:1])
            )
        elif rng.random() < 0.5:
            predicates.append(Predicate(name, rng.choice(["<", "<="]), rng.randint(250, 350)))
        else:
            predicates.append(Predicate(name, rng.choice([">", ">="]), rng.randint(650, 750)))
    return Filter(rng.choice(CLASSES), tuple(predicates))


def make_publication(rng: random.Random, mixed: bool) -> Publication:
    return Publication(
        rng.choice(CLASSES),
        {n: rng.choice(WORDS) if s else rng.randint(0, 1000) for n, s in attribute_names(mixed)},
    )


def per_call(
    action: Callable[[Publication, float], object], publications: list[Publication], budget: float
) -> float:
    """Mean seconds per call over the publications, stopping early once ``budget`` seconds are spent."""
    start = time.perf_counter()
    done = 0
    for publication in publications:
        action(publication, NOW)
        done += 1
        if time.perf_counter() - start > budget and done >= 3:
            break
    return (time.perf_counter() - start) / done


def build(subscriptions: list[Filter], mixed: bool) -> tuple[CountingMatcher, float]:
    """A matcher holding the subscriptions and the seconds it took, including the merge of the
    pending index entries that the first publication of each class triggers."""
    start = time.perf_counter()
    matcher = CountingMatcher()
    for i, f in enumerate(subscriptions):
        matcher.add(i, f)
    for cls in CLASSES:
        matcher.match(Publication(cls, {n: "a" if s else 0 for n, s in attribute_names(mixed)}), NOW)
    return matcher, time.perf_counter() - start


def index_memory(subscriptions: list[Filter], mixed: bool) -> int:
    """Bytes the matcher allocates for its indexes (the Filter objects exist before and are not counted)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    matcher, _ = build(subscriptions, mixed)
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del matcher
    return used


def run(workload: str, sizes: list[int], publications: int, scan_budget: float) -> list[dict[str, object]]:
    mixed = workload == "mixed"
    rng = random.Random(2026)
    subscriptions = [make_subscription(rng, mixed) for _ in range(max(sizes))]
    pubs = [make_publication(rng, mixed) for _ in range(publications)]
    rows = []
    for size in sizes:
        subset = subscriptions[:size]
        matcher, add_seconds = build(subset, mixed)
        linear = LinearMatcher()
        for i, f in enumerate(subset):
            linear.add(i, f)
        for p in pubs[:3]:  # the benchmark is only worth its numbers if both agree
            assert matcher.match(p, NOW) == linear.match(p, NOW)
        fast = per_call(matcher.match, pubs, budget=5.0)
        slow = per_call(linear.match, pubs, budget=scan_budget)
        mean_matches = sum(len(matcher.match(p, NOW)) for p in pubs[:200]) / 200
        rows.append(
            {
                "workload": workload,
                "subscriptions": size,
                "matcher_us": round(fast * 1e6, 1),
                "scan_us": round(slow * 1e6, 1),
                "speedup": round(slow / fast, 1),
                "add_s": round(add_seconds, 2),
                "index_mb": round(index_memory(subset, mixed) / 2**20, 1),
                "matches_per_pub": round(mean_matches, 1),
            }
        )
        print(
            f"{workload:6} {size:>7,} subs  matcher {fast * 1e6:8.1f} us/pub  "
            f"scan {slow * 1e6:10.1f} us/pub  x{slow / fast:7.1f}  "
            f"add+build {add_seconds:5.2f} s  index {rows[-1]['index_mb']:6.1f} MiB  "
            f"{mean_matches:6.1f} matches/pub",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    sizes = [1_000, 5_000] if args.quick else [10_000, 50_000, 200_000]
    rows = []
    for workload in ("ranges", "mixed"):
        rows += run(workload, sizes, publications=2000, scan_budget=1.0 if args.quick else 4.0)
    top = next(r for r in rows if r["workload"] == "ranges" and r["subscriptions"] == max(sizes))
    result = {
        "benchmark": "matching",
        "subscriptions": top["subscriptions"],
        "ms_per_publication": round(float(top["matcher_us"]) / 1000, 3),  # type: ignore[arg-type]
        "baseline": "linear scan, same subscriptions, same run",
        "baseline_ms_per_publication": round(float(top["scan_us"]) / 1000, 3),  # type: ignore[arg-type]
        "ratio": top["speedup"],
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
