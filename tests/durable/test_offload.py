"""Where an event loop runs a blocking disk call: on the loop while such calls are fast, in a
thread while their average is slow or for a while after one stalled."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from broker.durable.offload import Offload


def _call(seconds: float = 0.0) -> tuple[int, float]:
    """A stand-in for a commit: the thread it ran in, after ``seconds`` of blocking."""
    time.sleep(seconds)
    return threading.get_ident(), seconds


def test_fast_calls_run_on_the_loop_and_a_stall_sends_the_next_ones_to_a_thread_for_a_while() -> None:
    async def scenario() -> None:
        loop_thread = threading.get_ident()
        offload = Offload(fast=0.05, stall=0.1, calm=0.3)
        assert (await offload.run(_call))[0] == loop_thread
        assert (await offload.run(lambda: _call(0.15)))[0] == loop_thread  # the stall that tells
        assert (await offload.run(_call))[0] != loop_thread
        assert offload.threaded == 1
        await asyncio.sleep(0.35)  # calm, and the average has come down
        for _ in range(10):  # fast calls in the thread bring the average below ``fast``
            if (await offload.run(_call))[0] == loop_thread:
                break
        else:
            pytest.fail("calls did not come back to the loop")

    asyncio.run(scenario())


def test_calls_slower_than_fast_on_average_go_to_a_thread_but_one_slow_call_does_not() -> None:
    async def scenario() -> None:
        loop_thread = threading.get_ident()
        offload = Offload(fast=0.02, stall=1.0, calm=1.0)
        await offload.run(lambda: _call(0.03))  # one slow call (a preempted process): the average
        assert (await offload.run(_call))[0] == loop_thread  # is 0.006 s, below ``fast``
        for _ in range(10):
            await offload.run(lambda: _call(0.03))
        assert offload.average > 0.02
        assert (await offload.run(_call))[0] != loop_thread

    asyncio.run(scenario())


@pytest.mark.parametrize("stalled", [False, True])
def test_an_error_is_raised_to_the_caller_on_the_loop_and_from_the_thread(stalled: bool) -> None:
    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    async def scenario() -> None:
        offload = Offload(fast=0.05, stall=0.01, calm=10.0)
        if stalled:
            await offload.run(lambda: _call(0.02))
        with pytest.raises(OSError, match="No space left"):
            await offload.run(full_disk)
        assert offload.threaded == (1 if stalled else 0)

    asyncio.run(scenario())


def test_each_further_stall_keeps_the_calls_in_a_thread_twice_as_long() -> None:
    """A disk that stalls now and then must not freeze the loop at every episode."""

    async def scenario() -> None:
        loop_thread = threading.get_ident()
        offload = Offload(fast=0.05, stall=0.05, calm=0.5)
        await offload.run(lambda: _call(0.06))  # on the loop: threaded for 0.5 s
        await asyncio.sleep(0.6)
        assert (await offload.run(_call))[0] == loop_thread
        await offload.run(lambda: _call(0.06))  # again: threaded for 1 s now
        await asyncio.sleep(0.6)
        assert (await offload.run(_call))[0] != loop_thread
        await asyncio.sleep(0.5)
        assert (await offload.run(_call))[0] == loop_thread

    asyncio.run(scenario())
