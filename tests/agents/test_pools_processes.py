"""A pool of one slot against real brokers and agents: jobs of two workflows on agentA (the keeper)
and agentB share it, and the times the jobs themselves write show that no two ever ran at once,
through the death of agentB's host (its agent, its supervisor and its job killed with SIGKILL:
the slot comes back after the lease and a waiting job runs) and a SIGKILL of the keeper while a
job holds the slot."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

from tests.agents.test_processes import Overlay, overlay
from tests.processes import wait_for
from tests.wfm.test_operations import lines, wfm

__all__ = ["overlay"]  # the fixture

LEASE = 3.0
# each run writes "JOB GID start T" and "JOB GID end T" (its own clock), and its pid while it runs
RUN = (
    'echo "$WFM_JOB $WFM_GID start $(date +%s.%N)" >> "$WFM_OUTPUT/pool.log";'
    ' echo $$ > "$WFM_OUTPUT/$WFM_JOB.$WFM_GID.pid"; sleep SECONDS;'
    ' echo "$WFM_JOB $WFM_GID end $(date +%s.%N)" >> "$WFM_OUTPUT/pool.log"'
)
POOLED = f"""<workflow name="POOLED">
  <pool name="one" slots="1" keeper="agentA" lease="{LEASE:g}"/>
  <job name="P1" agent="agentA" pool="one"><command>{RUN.replace("SECONDS", "0.8")}</command></job>
  <job name="P2" agent="agentB" pool="one"><command>{RUN.replace("SECONDS", "0.8")}</command></job>
  <job name="P3" agent="agentB" pool="one"><command>{RUN.replace("SECONDS", "0.8")}</command></job>
</workflow>
"""
# H holds the slot for a minute: the host it runs on dies meanwhile
HOLDER = f"""<workflow name="HOLDER">
  <pool name="one" slots="1" keeper="agentA" lease="{LEASE:g}"/>
  <job name="Z" agent="agentA"><command>true</command></job>
  <job name="H" agent="agentB" pool="one"><command>{RUN.replace("SECONDS", "60")}</command></job>
</workflow>
"""


def intervals(overlay: Overlay, killed: dict[str, float]) -> list[tuple[float, float, str]]:
    """(start, end, run) of every run that started; a run killed ends at its kill."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for line in (overlay.output / "pool.log").read_text().splitlines():
        job, gid, what, at = line.split()
        (starts if what == "start" else ends)[f"{job} {gid}"] = float(at)
    return sorted((at, ends.get(run, killed.get(run, float("inf"))), run) for run, at in starts.items())


def assert_one_at_a_time(runs: list[tuple[float, float, str]]) -> None:
    for (_, end, run), (start, _, after) in itertools.pairwise(runs):
        assert end <= start, f"{run} (until {end}) and {after} (from {start}) ran at once: {runs}"


def kill_host(overlay: Overlay, agent: str, job_pid: Path) -> float:
    """SIGKILL to the agent, its supervisor and the job's process group: its host died."""
    overlay.agents[agent].send_signal(signal.SIGKILL)
    supervisor = int((overlay.tmp / agent / "supervisor.lock").read_text().split()[0])
    os.kill(supervisor, signal.SIGKILL)
    os.killpg(int(job_pid.read_text()), signal.SIGKILL)
    overlay.agents[agent].wait(5)
    return time.time()


def test_one_slot_across_two_agents_a_dead_host_and_a_killed_keeper(overlay: Overlay, tmp_path: Path) -> None:
    overlay.output.mkdir(parents=True)
    (tmp_path / "pooled.xml").write_text(POOLED)
    (tmp_path / "holder.xml").write_text(HOLDER)
    overlay.deploy(tmp_path / "pooled.xml")
    overlay.deploy(tmp_path / "holder.xml")

    # agentB's host dies while its H holds the slot, P1 (agentA), P2 and P3 (agentB) waiting:
    # after the lease the keeper takes the slot back and P1 runs
    overlay.trigger("HOLDER", ["h1"])
    held = overlay.output / "H.h1.pid"
    wait_for(held.exists, "H holds the slot")
    overlay.trigger("POOLED", ["g1"])
    waiting = {"P1": "WAITING FOR POOL ONE", "P2": "WAITING FOR POOL ONE", "P3": "WAITING FOR POOL ONE"}
    deadline = time.monotonic() + 10
    while (runs := lines(wfm(overlay, "runs", "POOLED", "-o", "json"))) == [] or runs[0]["jobs"] != waiting:
        assert time.monotonic() < deadline, f"wfm runs does not show g1 waiting for the pool: {runs}"
    died = kill_host(overlay, "agentB", held)
    wait_for(lambda: "P1 g1 end" in (overlay.output / "pool.log").read_text(), "P1 ran", timeout=3 * LEASE)
    p1 = next(start for start, _, run in intervals(overlay, {}) if run == "P1 g1")
    assert p1 >= died + LEASE / 2, "the slot came back before the dead holder's lease ran out"

    # agentB comes back (H is lost with its host, and not run again), and the keeper is killed
    # and restarted while P2 or P3 holds the slot
    overlay.start("agentB")
    wait_for(lambda: any(overlay.output.glob("P[23].g1.pid")), "P2 or P3 started", timeout=15)
    overlay.agents["agentA"].send_signal(signal.SIGKILL)
    overlay.agents["agentA"].wait(5)
    overlay.start("agentA")
    ended = ("P2 g1 end", "P3 g1 end")
    wait_for(lambda: all(e in (overlay.output / "pool.log").read_text() for e in ended), "P2, P3 ran", 20)
    while not {"P2", "P3"} <= set(overlay.statuses.get(("POOLED", "g1"), {})):
        overlay.collect(0.5)
    # (not APPL_END: a coordinator killed misses the statuses published while it is down)
    assert {job: state for job, state in overlay.states("POOLED", "g1").items() if job != "APPL_END"} == {
        "APPL_START": "SUCCESS",
        "P1": "SUCCESS",
        "P2": "SUCCESS",
        "P3": "SUCCESS",
    }
    overlay.wait_end("HOLDER", ["h1"], timeout=10)
    assert overlay.states("HOLDER", "h1")["H"] == "FAILURE"  # lost with its host, not run again
    # agentB told the supervisor of each run in the pool until when it may run (its window)
    lease = overlay.tmp / "agentB" / "logs" / "POOLED" / "g1" / "P2.1.lease"
    assert float(lease.read_text()) > p1
    runs = intervals(overlay, {"H h1": died})
    assert [run for _, _, run in runs][:2] == ["H h1", "P1 g1"] and len(runs) == 4
    assert_one_at_a_time(runs)
