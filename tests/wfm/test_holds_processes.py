"""``wfm hold``, ``wfm release`` and ``wfm approve`` against real brokers and agents (the agents'
tests' overlay: B1 - B2 - B3, agentA, agentB, agentC), each agent killed -9 while its job waits
(and the held one's again once it journaled the release, before acting on it): a held job starts
only once released, an approval step waiting for approval is still approvable after a restart,
and every job runs once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from tests.agents.test_processes import STEP, Overlay, overlay
from tests.processes import WFM, quiet, wait_for
from tests.wfm.test_operations import lines, wfm

__all__ = ["overlay"]  # the fixture

SHIP = f"""<workflow name="SHIP">
  <job name="Build" agent="agentA"><command>sh {STEP} build</command></job>
  <job name="SignOff" agent="agentB"><after job="Build"/><approval/></job>
  <job name="Ship" agent="agentC"><after job="SignOff"/><command>sh {STEP} ship</command></job>
</workflow>
"""


def states(overlay: Overlay) -> dict[str, object]:
    """The jobs of SHIP's g1 as wfm runs shows them."""
    found = [r for r in lines(wfm(overlay, "runs", "SHIP", "-o", "json")) if r["gid"] == "g1"]
    return found[0]["jobs"] if found else {}  # type: ignore[return-value]


def killed(overlay: Overlay, agent: str, failpoints: str = "") -> None:
    """kill -9 ``agent`` and start it again on its state directory (with ``failpoints`` armed)."""
    overlay.agents[agent].send_signal(signal.SIGKILL)
    overlay.agents[agent].wait(5)
    os.environ["WFM_FAILPOINTS"] = failpoints
    try:
        overlay.start(agent)
    finally:
        del os.environ["WFM_FAILPOINTS"]
    quiet(overlay.uris)


def test_held_and_awaiting_approval_over_kill_9_run_once_when_released_and_approved(
    overlay: Overlay, tmp_path: Path
) -> None:
    ship = tmp_path / "ship.xml"
    ship.write_text(SHIP)
    overlay.deploy(ship)
    held = lines(wfm(overlay, "hold", "SHIP", "--job", "Ship", "-o", "json"))
    assert sorted((r["agent"], r["result"]) for r in held) == [(f"agent{x}", "OK") for x in "ABC"]
    overlay.trigger("SHIP", ["g1"])
    wait_for(lambda: states(overlay).get("SignOff") == "AWAITING", "SignOff awaiting approval")
    killed(overlay, "agentB")
    done = wfm(overlay, "approve", "SHIP", "SignOff", "g1", "--comment", "ship it", "-o", "json")
    [approved] = lines(done)
    assert (approved["agent"], approved["result"], approved["verdict"]) == ("agentB", "OK", "approve")
    assert str(approved["detail"]).startswith("approved by sha256:") and approved["detail"].endswith(
        ": ship it"
    )
    wait_for(lambda: states(overlay).get("Ship") == "HELD", "Ship held")
    # killed while held; then again with the RELEASE in its journal, before it acted on it
    killed(overlay, "agentC", failpoints="agent.journaled.RELEASE:1")
    assert not (overlay.output / "SHIP" / "g1" / "Ship.txt").exists()
    release = [WFM, "release", "SHIP", "--job", "Ship", "-o", "json", "--broker", str(overlay.uris["B1"])]
    releasing = subprocess.Popen(release, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert overlay.agents["agentC"].wait(10) == -signal.SIGKILL
    overlay.start("agentC")
    out, err = releasing.communicate(timeout=20)
    assert releasing.returncode == 0, err
    released = {r["agent"]: r["detail"] for r in map(json.loads, out.splitlines())}
    assert "failpoint agent.journaled.RELEASE (pass 1): killed" in (tmp_path / "agentC.log").read_text()
    # its outbox kept the acknowledgement of the release it journaled (replayed, it started Ship),
    # unless the release sent again came first and found nothing held
    assert released["agentC"] in ("job Ship of SHIP released: 1 started", "job Ship of SHIP was not held")
    overlay.wait_end("SHIP", ["g1"])
    assert overlay.states("SHIP", "g1") == {
        "APPL_START": "SUCCESS",
        "Build": "SUCCESS",
        "SignOff": "SUCCESS",
        "Ship": "SUCCESS",
        "APPL_END": "SUCCESS",
    }
    assert overlay.statuses["SHIP", "g1"]["SignOff"]["detail"] == approved["detail"]
    assert overlay.records("SHIP", "g1") == {"Build": 1, "Ship": 1}


def test_wfm_monitor_shows_a_job_awaiting_approval_and_a_held_one_live_then_their_end(
    overlay: Overlay, tmp_path: Path
) -> None:
    """The states agents publish (JOBSTATE) reach a ``wfm monitor -o json`` started before the
    trigger: SignOff AWAITING, Ship HELD then RUNNING once released, and each job's status last."""
    ship = tmp_path / "ship.xml"
    ship.write_text(SHIP)
    overlay.deploy(ship)
    lines(wfm(overlay, "hold", "SHIP", "--job", "Ship", "-o", "json"))
    command = [WFM, "monitor", "SHIP", "--gid", "g1", "-o", "json", "--timeout", "60"]
    monitor = subprocess.Popen(
        [*command, "--broker", str(overlay.uris["B3"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[dict[str, object]] = []
    said: list[str] = []
    readers = [
        threading.Thread(target=lambda: seen.extend(json.loads(line) for line in monitor.stdout or ())),
        threading.Thread(target=lambda: said.extend(monitor.stderr or ())),
    ]
    for reader in readers:
        reader.start()
    try:
        wait_for(lambda: any("waiting for generation g1" in line for line in said), "the monitor subscribed")
        overlay.trigger("SHIP", ["g1"])

        def shown(job: str, status: str) -> bool:
            return any((r["job"], r["status"]) == (job, status) for r in seen)

        wait_for(lambda: shown("SignOff", "AWAITING"), "SignOff awaiting approval, in the monitor")
        lines(wfm(overlay, "approve", "SHIP", "SignOff", "g1", "-o", "json"))
        wait_for(lambda: shown("Ship", "HELD"), "Ship held, in the monitor")
        assert not shown("Ship", "SUCCESS")
        lines(wfm(overlay, "release", "SHIP", "--job", "Ship", "-o", "json"))
        assert monitor.wait(60) == 0, "".join(said)
    finally:
        if monitor.poll() is None:
            monitor.kill()
        for reader in readers:
            reader.join(10)
        for pipe in (monitor.stdout, monitor.stderr):
            if pipe is not None:
                pipe.close()
    ship_lines = [(r["status"], r.get("live", False)) for r in seen if r["job"] == "Ship"]
    assert ship_lines == [("HELD", True), ("RUNNING", True), ("SUCCESS", False)]
    [held] = [r for r in seen if r["job"] == "Ship" and r["status"] == "HELD"]
    assert (held["detail"], held["agentname"]) == ("on hold: job Ship of SHIP", "agentC")
    signoff = [r["status"] for r in seen if r["job"] == "SignOff"]
    assert signoff == ["AWAITING", "SUCCESS"]
    assert [r["status"] for r in seen if r["job"] == "APPL_END"] == ["SUCCESS"]
