"""Conditions on other workflows and on events against real brokers, agents and a historian: a
job of BILLING waits for LEDGER's Close of the same date, whether Close ended before BILLING was
deployed (the history, handed over by ``wfm deploy``) or after BILLING's generation started (live);
a job waits for a FILE_ARRIVED event published with ``wfm client``, each one letting one
generation through. Runs are counted from what the jobs leave under ``$WFM_OUTPUT``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.agents.test_processes import MONDAY, STEP, Overlay, overlay
from tests.history.test_historian import start_historian, stop
from tests.processes import WFM
from wfm.history.landing import read_landing, segments

__all__ = ["overlay"]  # the fixture

TUESDAY = "2026.11.24"


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / f"{name.lower()}.xml"
    path.write_text(text)
    return path


def kept(store: Path, workflow: str) -> bool:
    """Whether the historian of ``store`` landed a status of ``workflow``."""
    return any(
        f"[applname,{workflow}]" in str(s.publication) for s in read_landing(segments(store / "landing"))
    )


def quiet_for(overlay: Overlay, seconds: float) -> None:
    """Collect every status published for ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        overlay.collect(0.1)


def file_arrives(overlay: Overlay, n: int) -> None:
    """``wfm client`` publishes a FILE_ARRIVED of /in/x.csv, the ``n``-th."""
    commands = (
        "a [class,eq,FILE_ARRIVED],[path,isPresent,''],[n,isPresent,0]\n"
        f"p [class,FILE_ARRIVED],[path,'/in/x.csv'],[n,{n}]\n"
    )
    done = subprocess.run(
        [WFM, "client", "--broker", str(overlay.uris["B1"]), "--linger", "0.2"],
        input=commands,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def test_jobs_wait_for_another_workflow_and_for_an_event(overlay: Overlay, tmp_path: Path) -> None:
    ledger = write(
        tmp_path,
        "LEDGER",
        f'<workflow name="LEDGER">\n<job name="Close" agent="agentA"><command>sh {STEP} close</command>'
        "</job>\n</workflow>",
    )
    billing = write(
        tmp_path,
        "BILLING",
        f"""<workflow name="BILLING">
  <job name="Invoice" agent="agentC">
    <wait workflow="LEDGER" job="Close"/><command>sh {STEP} invoice</command>
  </job>
  <job name="Load" agent="agentB">
    <event filter="[class,eq,FILE_ARRIVED],[path,eq,'/in/x.csv']"/><command>sh {STEP} load</command>
  </job>
</workflow>""",
    )
    store = tmp_path / "history"
    historian = start_historian(overlay.uris["B2"], store)
    try:
        overlay.deploy(ledger)
        # (b) Close ends for Monday before BILLING is even deployed: the history has it
        for n in range(20):  # until the historian's subscription has reached the agent's broker
            overlay.trigger("LEDGER", [f"l{n}"], MONDAY)
            overlay.wait_end("LEDGER", [f"l{n}"])
            if kept(store, "LEDGER"):
                break
            time.sleep(0.2)
        assert kept(store, "LEDGER"), "the historian kept no status of LEDGER"
        overlay.deploy(billing)
        overlay.trigger("BILLING", ["b-mon"], MONDAY)
        began = time.monotonic()
        while "Invoice" not in overlay.statuses.get(("BILLING", "b-mon"), {}):
            assert time.monotonic() - began < 15, "Invoice did not run on what the history kept"
            overlay.collect(0.2)
        quiet_for(overlay, 0.5)
        assert overlay.states("BILLING", "b-mon")["Invoice"] == "SUCCESS"
        assert "Load" not in overlay.statuses["BILLING", "b-mon"], "Load did not wait for its file"
        file_arrives(overlay, 1)
        overlay.wait_end("BILLING", ["b-mon"])
        assert overlay.records("BILLING", "b-mon") == {"Invoice": 1, "Load": 1}
        # (a) Tuesday's generation waits until Close ends for Tuesday (and a new file arrives)
        overlay.trigger("BILLING", ["b-tue"], TUESDAY)
        quiet_for(overlay, 1.0)
        assert overlay.statuses.get(("BILLING", "b-tue"), {}).keys() <= {"APPL_START"}, "nothing waited"
        overlay.trigger("LEDGER", ["l-tue"], TUESDAY)
        file_arrives(overlay, 2)
        overlay.wait_end("BILLING", ["b-tue"])
        assert overlay.records("BILLING", "b-tue") == {"Invoice": 1, "Load": 1}
        assert str(overlay.statuses["LEDGER", "l-tue"]["Close"]["date"]) == "2026-11-24"
    finally:
        stop(historian)
