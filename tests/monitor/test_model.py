"""The monitor's model: generations, job states, out-of-order arrival, APPL_END and exit status."""

from __future__ import annotations

from rich.console import Console

from broker.language import Value
from wfm.monitor import Monitor, render
from wfm.operations import generation_record


def trig(gid: str, day: str = "2026.11.23", workflow: str = "PAYROLL") -> dict[str, Value]:
    return {"class": "Trigger", "applname": workflow, "GID": gid, "schedule": day}


def status(gid: str, job: str, state: str, detail: str = "", **extras: Value) -> dict[str, Value]:
    return {
        "class": "JOBSTATUS",
        "applname": "PAYROLL",
        "jobname": job,
        "GID": gid,
        "status": state,
        "detail": detail,
        **extras,
    }


def test_a_generation_from_trigger_to_success() -> None:
    model = Monitor()
    assert model.receive(trig("g1")) is None
    event = model.receive(
        status("g1", "JobA", "SUCCESS", "exit 0", agentname="agentA", started=1.0e9, duration=2.5)
    )
    assert event is not None and event.record() == {
        "workflow": "PAYROLL",
        "gid": "g1",
        "job": "JobA",
        "status": "SUCCESS",
        "detail": "exit 0",
        "agentname": "agentA",
        "started": 1.0e9,
        "duration": 2.5,
    }
    generation = model.generations[("PAYROLL", "g1")]
    assert generation.date == "2026-11-23" and not model.done
    assert generation.jobs["JobA"].duration == 2.5
    model.receive(status("g1", "APPL_END", "SUCCESS"))
    assert model.done and model.exit_status() == 0


def test_out_of_order_statuses() -> None:
    model = Monitor(["g1"])
    model.receive(status("g1", "JobB", "SUCCESS", attempt=2))  # before the trigger
    model.receive(status("g1", "APPL_END", "SUCCESS"))  # APPL_END overtook JobA
    assert model.done  # no trigger seen is fine: the generation exists and has ended
    model.receive(status("g1", "JobB", "FAILURE", "exit 1", attempt=1))  # an older attempt, late
    model.receive(status("g1", "JobA", "SUCCESS"))
    model.receive(trig("g1"))
    generation = model.generations[("PAYROLL", "g1")]
    assert generation.jobs["JobB"].status == "SUCCESS"
    assert set(generation.jobs) == {"JobA", "JobB"} and generation.date == "2026-11-23"


def test_first_generation_seen_is_watched() -> None:
    model = Monitor()
    model.receive(status("g1", "JobA", "SUCCESS"))
    model.receive(status("g2", "JobA", "FAILURE"))
    model.receive(status("g2", "APPL_END", "FAILURE", "failed: JobA"))
    assert not model.done  # g2 ended, but g1 is the watched one
    model.receive(status("g1", "APPL_END", "SUCCESS"))
    assert model.done and model.exit_status() == 0
    assert [g.gid for g in model.generations.values()] == ["g1", "g2"]


def test_several_watched_generations_and_failure() -> None:
    model = Monitor(["g1", "g2"])
    model.receive(status("g3", "APPL_END", "FAILURE"))  # not watched (a wider subscription's)
    model.receive(status("g1", "APPL_END", "SUCCESS"))
    assert not model.done  # g2 not seen yet
    model.receive(status("g2", "APPL_END", "FAILURE", "failed: JobA; skipped: JobB, JobD"))
    assert model.done and model.exit_status() == 1


def test_appl_end_names_skipped_jobs() -> None:
    model = Monitor()
    model.receive(status("g1", "JobA", "FAILURE", "exit 3"))
    model.receive(status("g1", "APPL_END", "FAILURE", "failed: JobA; skipped: JobB, JobD"))
    jobs = model.generations[("PAYROLL", "g1")].jobs
    assert {job: (state.status, state.skipped) for job, state in jobs.items()} == {
        "JobA": ("FAILURE", False),
        "JobB": ("NORUN", True),  # NORUN, as the history and the reports say
        "JobD": ("NORUN", True),
    }
    model.receive(status("g1", "JobB", "NORUN", "skipped: JobA ended FAILURE", skipped=1, attempt=0))
    assert (jobs["JobB"].detail, jobs["JobB"].skipped) == ("skipped: JobA ended FAILURE", True)  # its own


def test_malformed_messages_are_ignored() -> None:
    model = Monitor()
    assert model.receive({"class": "JOBSTATUS", "applname": "P"}) is None
    assert (
        model.receive({"class": "JOBSTATUS", "applname": "P", "GID": "g", "jobname": 3, "status": "X"})
        is None
    )
    assert model.receive({"class": "stock", "applname": "P", "GID": "g"}) is None
    model.receive(trig("g1", day="soon"))
    assert model.generations[("PAYROLL", "g1")].date == "soon"


def test_render_shows_states_and_the_end() -> None:
    console = Console(width=120, record=True, color_system=None)
    model = Monitor()
    console.print(render(model))
    model.receive(trig("g1"))
    model.receive(status("g1", "APPL_START", "SUCCESS"))
    model.receive(status("g1", "JobA", "FAILURE", "exit 3", started=0.0, duration=1.25))
    console.print(render(model))
    model.receive(status("g1", "APPL_END", "FAILURE", "failed: JobA; skipped: JobB"))
    console.print(render(model))
    text = console.export_text()
    assert text.startswith("PAYROLL  g1"), (
        "an empty monitor shows nothing (it says what it waits for on stderr)"
    )
    assert "PAYROLL  g1  2026-11-23  running" in text
    assert "FAILURE (failed: JobA; skipped: JobB)" in text
    assert "1.2s" in text and "exit 3" in text and "SKIPPED" not in text
    assert "│ JobB       │ NORUN   │" in text
    assert text.index("APPL_START") < text.index("JobA")


def test_a_status_received_twice_is_one_event() -> None:
    """From the history and live, when a monitor catches up with a generation."""
    model = Monitor(["g1"])
    first = status("g1", "JobA", "SUCCESS", "exit 0", attempt=1)
    assert model.receive(first) is not None
    assert model.receive(dict(first)) is None
    assert model.receive(status("g1", "JobA", "FAILURE", "exit 1", attempt=2)) is not None
    end = status("g1", "APPL_END", "FAILURE", "failed: JobA")
    assert model.receive(end) is not None
    assert model.receive(dict(end)) is None
    assert model.done and model.exit_status() == 1


def test_a_cancelled_generation_is_a_failure_with_its_reason() -> None:
    model = Monitor()
    model.receive(status("g1", "JobA", "NORUN", "cancelled"))
    model.receive(status("g1", "APPL_END", "CANCELLED", "cancelled; failed: JobB"))
    assert model.done and model.exit_status() == 1
    assert model.unsuccessful() == ["PAYROLL g1 ended CANCELLED: cancelled; failed: JobB"]


def test_a_skip_is_norun_everywhere() -> None:
    """The monitor said SKIPPED where the history and the reports say NORUN: one word; ``skipped``
    tells a branch not taken from a day not scheduled (and -o json keeps the attribute)."""
    model = Monitor()
    event = model.receive(status("g1", "Alert", "NORUN", "skipped: JobA ended SUCCESS", skipped=1))
    assert event is not None and (event.status, event.record()["skipped"]) == ("NORUN", 1)
    model.receive(status("g1", "JobC", "NORUN", "not scheduled on Monday 2026-11-23", skipped=0))
    jobs = model.generations[("PAYROLL", "g1")].jobs
    assert (jobs["Alert"].status, jobs["Alert"].skipped) == ("NORUN", True)
    assert (jobs["JobC"].status, jobs["JobC"].skipped) == ("NORUN", False)


def test_durations_say_how_long_a_job_ran_and_nothing_for_one_that_did_not() -> None:
    """Every status but a run's carries duration 0 (APPL_START, NORUN, a skip): it showed 0.0s,
    as did a run of 30 ms."""
    console = Console(width=200, record=True, color_system=None)
    model = Monitor()
    model.receive(status("g1", "APPL_START", "SUCCESS", started=0.0, duration=0.0, attempt=0))
    model.receive(status("g1", "Quick", "SUCCESS", "exit 0", started=0.0, duration=0.031, attempt=1))
    model.receive(status("g1", "Long", "SUCCESS", "exit 0", started=0.0, duration=125.4, attempt=2))
    model.receive(status("g1", "JobC", "NORUN", "not scheduled", started=0.0, duration=0.0, attempt=0))
    console.print(render(model))
    rows = {
        line.split("│")[1].strip(): line.split("│")[4].strip()
        for line in console.export_text().splitlines()
        if line.startswith("│")
    }
    assert rows == {"APPL_START": "", "Quick": "31ms", "Long": "2m05s", "JobC": ""}


def test_a_long_log_path_is_folded_never_cut() -> None:
    """At 80 columns the detail's log path ended in an ellipsis: the one thing to copy was cut."""
    path = "/home/someone/workflows/.wfm/agents/agentA/logs/PAYROLL/20261123-114523-3f9a/JobA.1.log"
    console = Console(width=80, record=True, color_system=None)
    model = Monitor()
    model.receive(status("g1", "JobA", "SUCCESS", f"exit 0 after 0.1 s; log {path}", attempt=1, duration=0.1))
    console.print(render(model))
    text = console.export_text()
    assert "…" not in text
    pieces = [line.split("│")[5].strip() for line in text.splitlines() if line.startswith("│")]
    assert path in "".join(pieces)


EXPIRED_DETAIL = (
    "expired: the Trigger reached agentA 3.000 s after its expiry (2026-11-29 10:00:00 UTC); nothing ran"
)


def test_an_expired_generation_ends_without_any_job_and_is_not_a_success() -> None:
    """wfm trigger --ttl: the coordinator publishes APPL_END EXPIRED and nothing else."""
    model = Monitor()
    model.receive({**trig("g1"), "expires": 1795000000})
    event = model.receive(status("g1", "APPL_END", "EXPIRED", EXPIRED_DETAIL, agentname="agentA"))
    assert event is not None and event.record()["status"] == "EXPIRED"  # -o json
    generation = model.generations["PAYROLL", "g1"]
    assert generation.jobs == {} and generation.date == "2026-11-23"
    assert model.done and model.exit_status() == 1
    assert model.unsuccessful() == [f"PAYROLL g1 ended EXPIRED: {EXPIRED_DETAIL}"]
    record = generation_record(generation)  # a line of wfm runs
    assert (record["status"], record["detail"], record["jobs"]) == ("EXPIRED", EXPIRED_DETAIL, {})
    console = Console(width=200, record=True)
    console.print(render(model))
    shown = console.export_text()
    assert "PAYROLL  g1  2026-11-23" in shown and f"EXPIRED ({EXPIRED_DETAIL})" in shown


def test_a_missed_deadline_is_marked_on_its_job_and_generation() -> None:
    """The alert of a missed deadline (``workflow_messages.deadlines``) marks the job, or for
    APPL_END the generation, once however often it comes; a failure's alert marks nothing."""
    console = Console(width=140, record=True, color_system=None)
    model = Monitor()
    model.receive(trig("g1"))
    late = {**status("g1", "JobB", "DEADLINE", "deadline 30m missed: ..."), "class": "ALERT"}
    assert model.receive(late) is None and model.receive(late) is None
    assert model.receive({**late, "jobname": "JobA", "status": "FAILURE"}) is None
    model.receive({**late, "jobname": "APPL_END"})
    model.receive(status("g1", "JobB", "SUCCESS", "exit 0", started=0.0, duration=4000.0, attempt=1))
    generation = model.generations["PAYROLL", "g1"]
    assert generation.missed == ["JobB", "APPL_END"] and not model.done
    console.print(render(model))
    text = console.export_text()
    assert "deadline missed: JobB, the generation" in text and "1h06m late" in text


def live(gid: str, job: str, state: str, reason: str = "", since: float = 10.0) -> dict[str, Value]:
    """A JOBSTATE: where a job not ended stands (workflow_messages.jobstate)."""
    return {
        "class": "JOBSTATE",
        "applname": "PAYROLL",
        "jobname": job,
        "GID": gid,
        "state": state,
        "reason": reason,
        "agentname": "agentB",
        "since": since,
    }


def test_a_job_state_shows_until_its_status_which_it_never_replaces() -> None:
    model = Monitor(["g1"])
    model.receive(trig("g1"))
    event = model.receive(live("g1", "JobB", "HELD", "on hold: job JobB of PAYROLL"))
    assert event is not None and event.record() == {
        "workflow": "PAYROLL",
        "gid": "g1",
        "job": "JobB",
        "status": "HELD",
        "detail": "on hold: job JobB of PAYROLL",
        "agentname": "agentB",
        "since": 10.0,
        "live": True,
    }
    jobs = model.generations["PAYROLL", "g1"].jobs
    assert (jobs["JobB"].status, jobs["JobB"].live, jobs["JobB"].started) == ("HELD", True, 10.0)
    assert model.receive(live("g1", "JobB", "HELD", "on hold: job JobB of PAYROLL")) is None  # twice
    assert model.receive(live("g1", "JobB", "AWAITING", since=9.0)) is None  # began before: stale
    assert model.receive(live("g1", "JobB", "RUNNING", since=11.0)) is not None
    assert jobs["JobB"].status == "RUNNING"
    model.receive(status("g1", "JobB", "SUCCESS", "exit 0", attempt=1, started=11.0, duration=1.0))
    assert model.receive(live("g1", "JobB", "HELD", since=12.0)) is None  # a status is final
    assert model.receive(live("g1", "JobC", "HELD", since=12.0)) is not None
    model.receive(status("g1", "JobC", "NORUN", "cancelled"))  # attempt 0 still ends it
    assert (jobs["JobB"].status, jobs["JobC"].status) == ("SUCCESS", "NORUN")
    assert not model.done  # states never end a generation
    assert model.receive(live("g1", "APPL_END", "HELD")) is None
    assert model.receive({**live("g1", "JobD", "DANCING")}) is None  # not a state: ignored


def test_render_shows_a_held_job_and_a_queued_generation() -> None:
    model = Monitor()
    model.receive(trig("g1"))
    model.receive(live("g1", "JobB", "HELD", "waiting for LEDGER.Close"))
    model.receive(live("g2", "APPL_START", "QUEUED", "waiting its turn: max-active 1 generations run"))
    console = Console(width=200, record=True)
    console.print(render(model))
    text = console.export_text()
    assert "HELD" in text and "waiting for LEDGER.Close" in text
    assert "PAYROLL  g2    queued" in text and "waiting its turn" in text
    assert generation_record(model.generations["PAYROLL", "g2"])["status"] == "QUEUED"
