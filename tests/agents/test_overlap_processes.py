"""``max-active="1"`` (queue) against real brokers and agents: three generations triggered at once
run one after the other, in the order they were triggered, each job once, and ``kill -9`` of the
coordinator while two wait loses none and starts none twice. ``wfm trigger`` says a generation
is queued.

The brokers keep a client's session for a while (``--session-grace``, 600 s by default; the
shared fixture's brokers keep none): the Trigger of a waiting generation waits in the join state
of its start jobs' conditions at their broker, as every job's Trigger does while its predecessors
run, and a restarted agent takes its session back."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.test_processes import HOMES, LINE, STEP, WFM, Overlay
from tests.processes import brokers, quiet, wait_for

GIDS = ["g1", "g2", "g3"]


@pytest.fixture
def lasting(tmp_path: Path) -> Iterator[Overlay]:
    """The shared fixture's overlay, with brokers that keep a client's session for a minute."""
    with brokers(LINE, heartbeat=1.0, session_grace=60.0) as uris:
        world = Overlay(uris, tmp_path)
        try:
            for name in HOMES:
                world.start(name)
            quiet(uris)
            yield world
        finally:
            world.stop()


def one_at_a_time(tmp: Path, order: Path) -> Path:
    """First on agentA (the coordinator), then Work on agentB, which takes 5 s in g1 (the others
    wait meanwhile) and 0.5 s in the others: each appends to ``order`` when it starts and ends,
    so overlapping generations would interleave there."""
    path = tmp / "one.xml"
    path.write_text(f"""<workflow name="ONE" max-active="1" overlap="queue">
  <job name="First" agent="agentA"><command>echo "First $WFM_GID" >> {order}; sh {STEP} first</command></job>
  <job name="Work" agent="agentB"><after job="First"/>
    <command>echo "Work $WFM_GID" >> {order}; if [ $WFM_GID = g1 ]; then sleep 5; else sleep 0.5; fi
      sh {STEP} work; echo "Worked $WFM_GID" >> {order}</command>
  </job>
</workflow>""")
    return path


def test_three_triggers_run_one_after_the_other_through_a_kill_of_the_coordinator(
    lasting: Overlay, tmp_path: Path
) -> None:
    overlay = lasting
    order = tmp_path / "order.log"
    overlay.deploy(one_at_a_time(tmp_path, order))
    quiet(overlay.uris)
    overlay.trigger("ONE", GIDS[:2])
    command = [WFM, "trigger", "ONE", "--gid", "g3", "--date", "2026-11-23", "--wait", "1"]
    third = subprocess.Popen(
        [*command, "--broker", str(overlay.uris["B3"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while third.poll() is None:  # the observer takes what comes meanwhile
        overlay.collect(0.1)
    out, err = third.communicate()
    assert third.returncode == 0, err
    assert out == "g3\n" and "ONE generation g3 is queued" in err
    # kill -9 of the coordinator while g3 (and g2, unless this machine is slow) waits, then back
    coordinator = overlay.agents["agentA"]
    coordinator.send_signal(signal.SIGKILL)
    coordinator.wait(5)
    assert "Work g3" not in (order.read_text() if order.exists() else ""), "g3 had started: too slow"
    overlay.start("agentA")
    overlay.wait_end("ONE", GIDS, timeout=40)
    wait_for(lambda: order.read_text().count("Worked") == 3, "the last Work's line")
    assert order.read_text().splitlines() == [
        line for gid in GIDS for line in (f"First {gid}", f"Work {gid}", f"Worked {gid}")
    ]
    for gid in GIDS:
        assert overlay.states("ONE", gid) == {
            "APPL_START": "SUCCESS",
            "First": "SUCCESS",
            "Work": "SUCCESS",
            "APPL_END": "SUCCESS",
        }
        assert overlay.records("ONE", gid) == {"First": 1, "Work": 1}
