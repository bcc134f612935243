"""Real processes killed -9 at a precise moment (a failpoint, :mod:`broker.failpoints`), end to
end: what a restart finds there must lose nothing and run nothing twice."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.agents.test_journal import records
from tests.agents.test_processes import HOMES, LINE, STEP, Overlay
from tests.processes import WFM, brokers, quiet

MIDDLES = 4
PADDING = 40_000  # characters of each middle job's command: agentB's jobs need two DEPLOY parts


def split_workflow(tmp: Path) -> Path:
    """First (agentA), then Middle1-4 (agentB) whose long commands make agentB's deployment two
    DEPLOY envelopes, then Last (agentC) after them all."""
    middles = "\n".join(
        f'<job name="Middle{n}" agent="agentB"><after job="First"/>'
        f"<command>sh {STEP} middle{n} # {'x' * PADDING}</command></job>"
        for n in range(1, MIDDLES + 1)
    )
    after = "".join(f'<after job="Middle{n}"/>' for n in range(1, MIDDLES + 1))
    path = tmp / "split.xml"
    path.write_text(f"""<workflow name="SPLIT">
  <job name="First" agent="agentA"><command>sh {STEP} first</command></job>
  {middles}
  <job name="Last" agent="agentC">{after}<command>sh {STEP} last</command></job>
</workflow>""")
    return path


def test_an_agent_killed_between_the_parts_of_its_deployment_completes_it_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agentB dies (a failpoint) once the first DEPLOY part it took is journaled (and its answer
    stored in its outbox) and before its broker is told it is done: restarted, it has what it
    journaled, takes what its broker delivers again, answers the deployer (still re-sending), and
    the generation runs each job once. The parts come one frame after the other, so the kill
    usually falls between them (both in one batch of the agent's loop is possible under load)."""
    with brokers(LINE, heartbeat=1.0, session_grace=60.0) as uris:
        world = Overlay(uris, tmp_path)
        try:
            for name in HOMES:
                if name == "agentB":
                    monkeypatch.setenv("WFM_FAILPOINTS", "agent.journaled.DEPLOY:1")
                world.start(name)
                monkeypatch.delenv("WFM_FAILPOINTS", raising=False)
            quiet(uris)
            deploying = subprocess.Popen(
                [
                    WFM,
                    "deploy",
                    str(split_workflow(tmp_path)),
                    "--broker",
                    str(uris["B2"]),
                    "--timeout",
                    "40",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert world.agents["agentB"].wait(20) == -signal.SIGKILL
            log = (tmp_path / "agentB.log").read_text()
            assert "failpoint agent.journaled.DEPLOY (pass 1): killed" in log
            journaled = sum(
                1
                for r in records(tmp_path / "agentB")
                if r["event"] == "incoming" and r["pub"][1]["command"] == "DEPLOY"
            )
            world.start("agentB")
            out, err = deploying.communicate(timeout=60)
            assert deploying.returncode == 0, f"{journaled} parts journaled before the kill; {out}{err}"
            assert journaled >= 1
            assert "agentB: 2 OK" in out or "agentB: 1 OK" in out, out
            quiet(uris)
            world.trigger("SPLIT", ["g1"])
            world.wait_end("SPLIT", ["g1"], timeout=40)
            assert world.states("SPLIT", "g1")["APPL_END"] == "SUCCESS"
            expected = {"First": 1, "Last": 1} | {f"Middle{n}": 1 for n in range(1, MIDDLES + 1)}
            assert world.records("SPLIT", "g1") == expected
        finally:
            world.stop()
