"""Calendars in the definition end to end (the overlay of :mod:`tests.agents.test_processes`): a
job whose calendar leaves out a Saturday or a holiday publishes NORUN naming it and leaves no run
behind, its successor runs, and on a workday it runs."""

from __future__ import annotations

from tests.agents.test_processes import STEP, Overlay, overlay
from tests.processes import quiet

__all__ = ["overlay"]  # the fixture, shared

SATURDAY, CHRISTMAS, MONDAY = "2026.11.28", "2026.12.25", "2026.11.23"


def test_a_job_runs_only_on_the_dates_its_calendar_allows(overlay: Overlay) -> None:
    path = overlay.tmp / "ledger.xml"
    path.write_text(f"""<workflow name="CLOSE">
  <calendar name="FR" days="workdays"><holiday date="2026-12-25"/></calendar>
  <job name="Open" agent="agentA"><command>sh {STEP} open</command></job>
  <job name="Close" agent="agentB" calendar="FR"><after job="Open"/><command>sh {STEP} close</command></job>
  <job name="Report" agent="agentC"><after job="Close"/><command>sh {STEP} report</command></job>
</workflow>""")
    overlay.deploy(path)
    quiet(overlay.uris)
    overlay.trigger("CLOSE", ["sat"], SATURDAY)
    overlay.trigger("CLOSE", ["xmas"], CHRISTMAS)
    overlay.trigger("CLOSE", ["mon"], MONDAY)
    overlay.wait_end("CLOSE", ["sat", "xmas", "mon"])
    for gid in ("sat", "xmas"):
        assert overlay.states("CLOSE", gid) == {
            "APPL_START": "SUCCESS",
            "Open": "SUCCESS",
            "Close": "NORUN",
            "Report": "SUCCESS",
            "APPL_END": "SUCCESS",
        }
        assert overlay.records("CLOSE", gid) == {"Open": 1, "Report": 1}
    details = {gid: str(overlay.statuses["CLOSE", gid]["Close"]["detail"]) for gid in ("sat", "xmas")}
    assert details == {
        "sat": "not in calendar FR (mon,tue,wed,thu,fri): Saturday 2026-11-28",
        "xmas": "not in calendar FR: 2026-12-25 is a holiday",
    }
    assert overlay.records("CLOSE", "mon") == {"Open": 1, "Close": 1, "Report": 1}
