"""Thousands of seeds of the simulator in the suite, yet a report one can read: seeds are run in
batches, one test case each, and a batch that fails names every seed of it that failed, what
broke, and the command that replays that seed exactly."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from broker.sim.site import SiteSim

BATCH = 50  # seeds per test case: a few seconds each, so pytest's durations stay telling

# the trace's faults: what the seed decides before anything else (each chaos step draws them)
FAULTS = frozenset({"crash", "restart", "freeze", "partition", "heal", "blip"})


def batches(count: int, size: int = BATCH) -> list[range]:
    """``range(count)`` cut in ranges of ``size`` seeds."""
    return [range(first, min(first + size, count)) for first in range(0, count, size)]


def batch_id(seeds: range) -> str:
    return f"seeds{seeds.start}-{seeds.stop - 1}"


def faults(site: SiteSim) -> tuple[tuple[float, str, tuple[object, ...]], ...]:
    """The faults of a run, when and on whom: two seeds that gave the same would test one
    schedule twice."""
    return tuple(event for event in site.trace if event[1] in FAULTS)


def run_batch(
    seeds: Iterable[int],
    run: Callable[[int], SiteSim],
    replay: Callable[[int], str],
    stalled: Callable[[SiteSim], str | None] = lambda _: None,
    least: float = 0.8,
) -> None:
    """``run`` every seed (it raises if the seed breaks something: a ``Violation``, an error of
    the code under test); fails naming every seed that did, with its error and ``replay(seed)``,
    the command that replays it. The seeds that pass must have had faults scheduled differently
    from one another: the seed decides them. ``stalled``: why a run made too little progress
    (None if it made enough): at least ``least`` of the seeds must make enough (some schedules
    leave no quorum up for long: progress is the site's work under the faults, not a safety
    property a single seed must show)."""
    failures: list[str] = []
    schedules: dict[tuple[object, ...], int] = {}
    idle: list[str] = []
    seeds = list(seeds)
    for seed in seeds:
        try:
            site = run(seed)
        except Exception as error:  # every seed is run, so the report names all that fail
            failures.append(f"seed {seed}: {type(error).__name__}: {error}\n    replay: {replay(seed)}")
            continue
        other = schedules.setdefault(faults(site), seed)
        if other != seed:
            failures.append(f"seed {seed}: the same faults as seed {other}: the seed decided nothing")
        reason = stalled(site)
        if reason is not None:
            idle.append(f"seed {seed}: {reason}\n    replay: {replay(seed)}")
    if len(seeds) - len(idle) < least * len(seeds):
        failures.append(f"{len(idle)} of {len(seeds)} seeds made too little progress:")
        failures.extend(idle)
    if failures:
        pytest.fail(f"{len(seeds)} seeds run:\n" + "\n".join(failures), pytrace=False)
