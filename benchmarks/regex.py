"""What ``str-regex`` costs the matcher, against ``eq`` on the same subscriptions and publications.

200,000 subscriptions over 10 classes, each ``[class,eq,C],[sym,OP,V],[n,<,X]``: with ``OP`` ``eq``
and ``V`` a word, or ``OP`` ``str-regex`` and ``V`` the pattern ``^word$``, which accepts exactly the
same values: both matchers give the same answer, so the difference is what the operator costs.
Publications carry a class, a ``sym`` from the words and an ``n``. The cost of ``str-regex`` follows
the distinct patterns of the publication's class and attribute (each is one RE2 search of the value,
whatever the number of subscriptions sharing it), so the sweep varies the distinct patterns among
the 200,000 subscriptions: 100, 1,000 (the figure), 10,000, and one per subscription.

Each point reports µs per publication with ``eq``, ``^word$`` and ``word`` (steady state, after the
index is built; the best of three interleaved rounds) and their ratios, then ``eq`` and ``word`` for
publications whose value no publication had before (random letters: an RE2 set's DFA is built
lazily, state by state, as values lead it to new states), and the time to add the subscriptions
(which compiles each distinct pattern once, and the unanchored ones into sets). Ends with one
RESULT line: the figure (``^word$``, 1,000 distinct patterns), the baseline (``eq`` on the same
workload), their ratio, the unanchored figures, the one-pattern-per-subscription ratios and the
core count. ``--quick`` runs 20,000 subscriptions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from broker.language import Filter, Predicate, Publication
from broker.matching import CountingMatcher

CLASSES = [f"c{i}" for i in range(10)]
KINDS = ["eq", "anchored", "unanchored"]
NOW = 1_800_000_000.0


def fresh(count: int, seed: int) -> list[Publication]:
    """Publications whose ``sym`` no publication had before (random letters): each value leads an RE2
    set's lazily built DFA through states it may not have yet."""
    rng = random.Random(seed)
    return [
        Publication(
            rng.choice(CLASSES),
            {"sym": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12)), "n": 1},
        )
        for _ in range(count)
    ]


def workload(size: int, distinct: int, seed: int) -> tuple[list[tuple[str, str, int]], list[Publication]]:
    """(class, word, bound) per subscription, and publications: ``distinct`` words in all, each
    kept to one class so that a class holds ``distinct / 10`` of them."""
    rng = random.Random(seed)
    words = [f"w{n:06d}" for n in range(distinct)]
    rows = []
    for n in range(size):
        word = words[n % distinct]
        rows.append((CLASSES[int(word[1:]) % len(CLASSES)], word, rng.randint(1, 1000)))
    publications = []
    for _ in range(3000):
        word = rng.choice(words)
        publications.append(
            Publication(CLASSES[int(word[1:]) % len(CLASSES)], {"sym": word, "n": rng.randint(0, 999)})
        )
    return rows, publications


def build(rows: list[tuple[str, str, int]], kind: str) -> tuple[CountingMatcher, float]:
    start = time.perf_counter()
    matcher = CountingMatcher()
    for n, (cls, word, bound) in enumerate(rows):
        if kind == "eq":
            sym = Predicate("sym", "eq", word)
        else:  # the words are all 7 characters long: either pattern accepts exactly the word
            sym = Predicate("sym", "str-regex", f"^{word}$" if kind == "anchored" else word)
        matcher.add(n, Filter(cls, (sym, Predicate("n", "<", bound))))
    while matcher.settle(1 << 20):  # the sorted indexes complete, as a quiet broker makes them
        pass
    return matcher, time.perf_counter() - start


def per_publication(matcher: CountingMatcher, publications: list[Publication], budget: float) -> float:
    start = time.perf_counter()
    done = 0
    for publication in publications:
        matcher.match(publication, NOW)
        done += 1
        if done >= 20 and time.perf_counter() - start > budget:
            break
    return (time.perf_counter() - start) / done


def point(size: int, distinct: int, budget: float) -> dict[str, object]:
    rows, publications = workload(size, distinct, seed=distinct)
    matchers, adds = {}, {}
    for kind in KINDS:
        matchers[kind], adds[kind] = build(rows, kind)
    for publication in publications[:20]:  # the figures are only worth something if all agree
        answers = [sorted(m.match(publication, NOW)) for m in matchers.values()]  # type: ignore[type-var]
        assert all(answer == answers[0] for answer in answers)
    matches = sum(len(matchers["eq"].match(p, NOW)) for p in publications[:200]) / 200
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    share = len(publications) // 3
    for r in range(3):  # interleaved rounds: a burst of other work on a shared machine spoils one
        part = publications[r * share : (r + 1) * share]
        for kind in KINDS:
            times[kind].append(per_publication(matchers[kind], part, budget / 3 / len(KINDS)))
    us = {kind: min(times[kind]) * 1e6 for kind in KINDS}
    unseen = fresh(1000, seed=distinct)
    fresh_eq = per_publication(matchers["eq"], unseen, budget / 4) * 1e6
    fresh_unanchored = per_publication(matchers["unanchored"], unseen, budget / 4) * 1e6
    row: dict[str, object] = {
        "subscriptions": size,
        "distinct_patterns": distinct,
        "patterns_per_class": distinct // len(CLASSES),
        "matches_per_publication": round(matches, 1),
    }
    for kind in KINDS:
        row[f"{kind}_us"] = round(us[kind], 1)
        row[f"{kind}_add_s"] = round(adds[kind], 2)
    for kind in KINDS[1:]:
        row[f"{kind}_ratio"] = round(us[kind] / us["eq"], 1)
    row["fresh_eq_us"], row["fresh_unanchored_us"] = round(fresh_eq, 1), round(fresh_unanchored, 1)
    print(
        f"{size:>7,} subs  {distinct:>7,} patterns ({distinct // len(CLASSES):>6,} a class)  "
        f"{matches:6.1f} matches/pub  eq {us['eq']:7.1f} us/pub  "
        f"'^w$' {us['anchored']:7.1f} us/pub (x{us['anchored'] / us['eq']:5.1f})  "
        f"'w' {us['unanchored']:9.1f} us/pub (x{us['unanchored'] / us['eq']:7.1f})  "
        f"unseen values: eq {fresh_eq:6.1f}, 'w' {fresh_unanchored:7.1f} us/pub  "
        f"add: {adds['eq']:4.1f} s, {adds['anchored']:4.1f} s, {adds['unanchored']:4.1f} s",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 subscriptions, for a smoke run")
    args = parser.parse_args()
    size = 20_000 if args.quick else 200_000
    budget = 1.0 if args.quick else 3.0
    rows = [point(size, distinct, budget) for distinct in (100, 1_000, 10_000, size)]
    figure = next(r for r in rows if r["distinct_patterns"] == 1_000)
    worst = rows[-1]
    result = {
        "benchmark": "regex",
        "subscriptions": size,
        "distinct_patterns": 1_000,
        "us_per_publication": figure["anchored_us"],
        "baseline": "eq on the same subscriptions and publications, same run",
        "baseline_us_per_publication": figure["eq_us"],
        "ratio": figure["anchored_ratio"],
        "unanchored_us_per_publication": figure["unanchored_us"],
        "unanchored_ratio": figure["unanchored_ratio"],
        "unanchored_unseen_values_us_per_publication": figure["fresh_unanchored_us"],
        "one_pattern_per_subscription_anchored_ratio": worst["anchored_ratio"],
        "one_pattern_per_subscription_unanchored_ratio": worst["unanchored_ratio"],
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
