"""Run parameters end to end, with real brokers and agents: ``wfm trigger --param`` refuses what
does not fit before publishing, a job's command sees ``WFM_PARAM_*`` (a later job on another
agent too, defaults included), ``wfm runs`` shows them, and ``wfm rerun --param`` overrides one."""

from __future__ import annotations

import json
import time
from pathlib import Path

from broker.client import BlockingClient
from tests.agents.test_processes import Overlay, overlay
from tests.processes import quiet
from tests.wfm.test_operations import lines, wfm

__all__ = ["overlay"]  # the fixture

WRITE = 'mkdir -p "$WFM_OUTPUT/p"; printf "%s %s %s" "$WFM_PARAM_REGION" "$WFM_PARAM_LIMIT" "$WFM_PARAM_DRY"'
DEFINITION = f"""<workflow name="PARAMS">
  <param name="REGION" default="eu"/>
  <param name="LIMIT" type="int"/>
  <param name="DRY" type="bool" default="false"/>
  <job name="First" agent="agentA"><command>{WRITE} > "$WFM_OUTPUT/p/$WFM_GID.First"</command></job>
  <job name="Second" agent="agentC">
    <after job="First"/>
    <command>{WRITE} > "$WFM_OUTPUT/p/$WFM_GID.Second"</command>
  </job>
</workflow>
"""


def written(overlay: Overlay, gid: str) -> dict[str, str]:
    return {job: (overlay.output / "p" / f"{gid}.{job}").read_text() for job in ("First", "Second")}


def test_parameters_reach_every_job_and_a_rerun_overrides_them(overlay: Overlay, tmp_path: Path) -> None:
    definition = tmp_path / "params.xml"
    definition.write_text(DEFINITION)
    overlay.deploy(definition)
    with BlockingClient(overlay.uris["B3"]) as historian:
        historian.subscribe("[class,eq,Trigger],[applname,eq,PARAMS],[GID,isPresent,'']")
        quiet(overlay.uris)
        for bad, why in (
            (["--param", "LIMIT=many"], "PARAMS: parameter LIMIT (int): 'many' is not an integer"),
            ([], "PARAMS: required parameter LIMIT (int) not given"),
            (["--param", "LIMIT=1", "--param", "COLOR=red"], "unknown parameter COLOR"),
        ):
            refused = wfm(overlay, "trigger", "PARAMS", "--gid", "g-bad", *bad)
            assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
            assert why in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
        assert historian.receive(timeout=1) is None  # nothing published

        began = time.monotonic()
        done = wfm(
            overlay, "trigger", "PARAMS", "--gid", "g1", "--date", "2026-11-23", "--param", "LIMIT=007"
        )
        assert (done.returncode, done.stdout) == (0, "g1\n"), done.stderr
        delivery = historian.receive(timeout=5)
        assert delivery is not None  # the Trigger as the history keeps it: every parameter
        assert json.loads(str(delivery.publication["params"])) == {
            "DRY": "false",
            "LIMIT": "7",
            "REGION": "eu",
        }
    overlay.wait_end("PARAMS", ["g1"])
    assert overlay.states("PARAMS", "g1")["APPL_END"] == "SUCCESS"
    assert written(overlay, "g1") == {"First": "eu 7 false", "Second": "eu 7 false"}
    [run] = lines(wfm(overlay, "runs", "PARAMS", "-o", "json"))
    assert (run["gid"], run["params"]) == ("g1", {"DRY": "false", "LIMIT": "7", "REGION": "eu"})

    again = wfm(overlay, "rerun", "PARAMS", "--gid", "g1", "--param", "REGION=us", "--param", "DRY=yes")
    assert (again.returncode, again.stdout) == (0, "g1-r1\n"), again.stderr
    overlay.wait_end("PARAMS", ["g1-r1"])
    assert written(overlay, "g1-r1") == {"First": "us 7 true", "Second": "us 7 true"}
    wrong = wfm(overlay, "rerun", "PARAMS", "--gid", "g1", "--param", "DRY=perhaps")
    assert (
        wrong.returncode == 2
        and "PARAMS: parameter DRY (bool): 'perhaps' is not true or false" in wrong.stderr
    )
    assert time.monotonic() - began < 120
