"""A deadline against real brokers and agents: a job still sleeping past its deadline raises its
alert at once, which ``wfm alerts`` lists (from another broker) before the job ends, and which
``wfm alerts ack`` acknowledges by its id ``W.J.G.deadline``."""

from __future__ import annotations

import time
from pathlib import Path

from tests.agents.test_processes import Overlay, overlay
from tests.wfm.test_operations import lines, wfm

__all__ = ["overlay"]  # the fixture

LATE = """<workflow name="LATE">
  <job name="First" agent="agentA"><command>echo first</command></job>
  <job name="Sleep" agent="agentB" deadline="1s"><after job="First"/><command>sleep 5</command></job>
</workflow>
"""


def test_a_job_past_its_deadline_raises_an_alert_before_it_ends(overlay: Overlay, tmp_path: Path) -> None:
    late = tmp_path / "late.xml"
    late.write_text(LATE)
    overlay.deploy(late)
    overlay.trigger("LATE", ["g1"])
    began = time.monotonic()
    found: list[dict[str, object]] = []
    while not found:
        assert time.monotonic() - began < 4.5, "no deadline alert while Sleep ran"
        listed = lines(wfm(overlay, "alerts", "-o", "json", "--wait", "0.5"))
        found = [r for r in listed if r["gid"] == "g1"]
    [alert] = found
    assert (alert["id"], alert["job"], alert["status"], alert["priority"]) == (
        "LATE.Sleep.g1.deadline",
        "Sleep",
        "DEADLINE",
        8,
    )
    assert str(alert["detail"]).startswith("deadline 1s missed: Sleep had not ended by ")
    drained = time.monotonic() + 0.3
    while time.monotonic() < drained:  # every status published so far
        overlay.collect(0.05)
    assert "Sleep" not in overlay.statuses.get(("LATE", "g1"), {}), "the alert came only after the job ended"
    overlay.wait_end("LATE", ["g1"])
    assert overlay.states("LATE", "g1")["Sleep"] == "SUCCESS"
    [run] = [r for r in lines(wfm(overlay, "runs", "LATE", "-o", "json")) if r["gid"] == "g1"]
    assert run["missed"] == ["Sleep"]  # wfm runs says so, from the agents, once it is over too
    done = wfm(overlay, "alerts", "ack", "LATE.Sleep.g1.deadline")
    assert done.returncode == 0, done.stderr
    assert [r for r in lines(wfm(overlay, "alerts", "-o", "json")) if r["gid"] == "g1"] == []
