"""``<calendar>`` declarations and a job's ``calendar="NAME"``: read, checked with their lines, part
of the version, and carried whole in the job's DEPLOY entry."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pytest

from tests.workflow.test_cli import ROOT, wfm
from wfm.workflow import DefinitionError, Job, Workflow, load, loads, translate
from workflow_messages import Calendar
from workflow_messages.named_calendars import NamedCalendar, excluded, read_record

JOBS = (
    '<job name="A" agent="agentA" calendar="FR"><command>true</command></job>\n'
    '<job name="B" agent="agentB"><after job="A"/><command>true</command></job>'
)
CHRISTMAS, SATURDAY, MONDAY = date(2026, 12, 25), date(2026, 11, 28), date(2026, 11, 23)


def document(*calendars: str, jobs: str = JOBS) -> str:
    return '<workflow name="W">\n' + "\n".join(calendars) + "\n" + jobs + "\n</workflow>\n"


FR = (
    '<calendar name="FR" days="workdays">\n'
    '<holiday date="2026-12-25"/>\n<holiday date="2027-01-01"/>\n</calendar>'
)


def test_a_declared_calendar_is_read_with_its_days_holidays_and_line() -> None:
    workflow = loads(document(FR, '<calendar name="ALL"/>'))
    fr = NamedCalendar("FR", Calendar(frozenset(range(5)), frozenset({CHRISTMAS, date(2027, 1, 1)})))
    assert workflow.calendars == (fr, NamedCalendar("ALL"))
    assert [c.line for c in workflow.calendars] == [2, 6]
    assert [job.calendar for job in workflow.jobs] == ["FR", None]


def test_calendars_come_after_the_params_and_before_the_jobs() -> None:
    workflow = loads(document('<param name="REGION" default="eu"/>', FR))
    assert workflow.params[0].name == "REGION" and workflow.calendars[0].name == "FR"


def test_every_bad_calendar_is_reported_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "w.xml"
    jobs = JOBS.replace('calendar="FR"', 'calendar="UK"')
    path.write_text(
        document(
            '<calendar name="FR" days="workdays,someday"/>',
            '<calendar name="FR">',
            '  <holiday date="2026-02-30"/>',
            '  <holiday date="25/12/2026"/>',
            '  <holiday date="2026-12-25"/>',
            '  <holiday date="2026-12-25"/>',
            "</calendar>",
            '<calendar name="9 lives"/>',
            jobs=jobs,
        )
    )
    with pytest.raises(DefinitionError) as caught:
        load(path)
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (
            2,
            "calendar 'FR': unknown day word 'someday' (use daily, workdays, weekends or a comma list of"
            " mon tue wed thu fri sat sun)",
        ),
        (3, "duplicate calendar 'FR' (first on line 2)"),
        (4, "calendar 'FR': holiday '2026-02-30' is not a date YYYY-MM-DD"),
        (5, "calendar 'FR': holiday '25/12/2026' is not a date YYYY-MM-DD"),
        (7, "calendar 'FR': holiday 2026-12-25 twice (first on line 6)"),
        (
            9,
            "calendar name '9 lives' is not a valid name (letters, digits and _ - : /, not starting with a"
            " digit or -)",
        ),
        (10, "job 'A': unknown calendar 'UK' (declared: 9 lives, FR)"),
    ]


def test_a_job_naming_a_calendar_in_a_workflow_that_declares_none() -> None:
    with pytest.raises(DefinitionError) as caught:
        loads(document())
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (3, "job 'A': unknown calendar 'FR' (none is declared)")
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '<workflow name="W">' + JOBS + '<calendar name="LATE"/></workflow>',
            "unexpected <calendar> (a workflow declares its <calendar> elements after its <param>"
            " elements and before its jobs)",
        ),
        (
            '<workflow name="W"><calendar days="daily"/>' + JOBS + "</workflow>",
            "<calendar> needs a 'name' attribute",
        ),
        (
            '<workflow name="W"><calendar name="FR"><holiday/></calendar>' + JOBS + "</workflow>",
            "<holiday> needs a 'date' attribute",
        ),
        (
            '<workflow name="W"><calendar name="FR" base="x"/>' + JOBS + "</workflow>",
            "unknown attribute 'base' on <calendar>",
        ),
        ('<workflow name="W"><calendar name="FR"/></workflow>', "<workflow> needs at least one <job>"),
        (
            '<workflow name="W"><calendar name="FR"/><param name="A"/>' + JOBS + "</workflow>",
            "unexpected <param> (a workflow declares its <param> elements first,"
            " before its calendars and jobs)",
        ),
        ('<workflow name="W"></workflow>', "<workflow> needs at least one <job>"),
    ],
)
def test_shape_errors_in_plain_words(text: str, problem: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        loads(text)
    assert [p.message for p in caught.value.problems] == [problem]


def test_workflows_built_in_code_are_checked_alike() -> None:
    with pytest.raises(DefinitionError) as caught:
        Workflow(
            "W",
            (Job("A", "agentA", "true", calendar="FR"),),
            calendars=(NamedCalendar("FR", Calendar(frozenset())),),
        )
    assert [p.message for p in caught.value.problems] == [
        "calendar 'FR': its days are a non-empty set of weekdays 0 (Monday) to 6"
    ]


def test_the_calendar_is_part_of_the_version_only_when_declared() -> None:
    plain = Workflow("W", (Job("A", "agentA", "true"),))
    declared = Workflow("W", (Job("A", "agentA", "true"),), calendars=(NamedCalendar("FR"),))
    used = Workflow("W", (Job("A", "agentA", "true", calendar="FR"),), calendars=(NamedCalendar("FR"),))
    other = NamedCalendar("FR", Calendar(holidays=frozenset({CHRISTMAS})))
    holiday = Workflow("W", (Job("A", "agentA", "true", calendar="FR"),), calendars=(other,))
    assert len({plain.version(), declared.version(), used.version(), holiday.version()}) == 4
    # a workflow without calendars keeps the version it had: the golden plans do not change


def test_the_job_entry_carries_its_calendar_whole() -> None:
    plan = translate(loads(document(FR)))
    entries = {
        entry["job"]: entry for envelope in plan.envelopes for entry in json.loads(envelope.content)["jobs"]
    }
    assert entries["A"]["calendar"] == {
        "name": "FR",
        "days": ["mon", "tue", "wed", "thu", "fri"],
        "holidays": ["2026-12-25", "2027-01-01"],
    }
    assert "calendar" not in entries["B"]
    assert read_record(entries["A"]["calendar"]) == loads(document(FR)).calendars[0]


def test_what_a_calendar_excludes_and_why() -> None:
    fr = loads(document(FR)).calendars[0]
    assert excluded(fr, MONDAY) is None
    assert excluded(fr, SATURDAY) == "not in calendar FR (mon,tue,wed,thu,fri): Saturday 2026-11-28"
    assert excluded(fr, CHRISTMAS) == "not in calendar FR: 2026-12-25 is a holiday"


@pytest.mark.parametrize(
    "record",
    [
        None,
        {"name": "FR", "days": ["mon"]},
        {"name": "", "days": ["mon"], "holidays": []},
        {"name": "FR", "days": [], "holidays": []},
        {"name": "FR", "days": ["workdays"], "holidays": []},
        {"name": "FR", "days": ["mon"], "holidays": ["2026-02-30"]},
        {"name": "FR", "days": ["mon"], "holidays": [20261225]},
    ],
)
def test_a_bad_record_is_refused_in_one_line(record: object) -> None:
    with pytest.raises(ValueError, match=r"calendar|holiday") as caught:
        read_record(record)
    assert "\n" not in str(caught.value)


def test_validate_lists_each_calendar_and_the_jobs_that_reference_it(tmp_path: Path) -> None:
    (tmp_path / "w.xml").write_text(document(FR, '<calendar name="ALL"/>'))
    done = wfm("validate", "w.xml", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "w.xml: ok (2 jobs, agents agentA, agentB)\n"
        "  calendar FR (mon,tue,wed,thu,fri; 2 holidays): A\n"
        "  calendar ALL (mon,tue,wed,thu,fri,sat,sun): no job\n"
    )
    done = wfm("validate", "w.xml", "-o", "json", cwd=tmp_path)
    assert json.loads(done.stdout)["calendars"] == {
        "FR": {
            "name": "FR",
            "days": ["mon", "tue", "wed", "thu", "fri"],
            "holidays": ["2026-12-25", "2027-01-01"],
            "jobs": ["A"],
        },
        "ALL": {
            "name": "ALL",
            "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
            "holidays": [],
            "jobs": [],
        },
    }


def test_a_calendar_may_take_its_holidays_from_a_schedule_holiday_file(tmp_path: Path) -> None:
    shutil.copy(ROOT / "workflows" / "holidays-2026.txt", tmp_path)
    calendar = (
        '<calendar name="FR" days="workdays" holidays="holidays-2026.txt">'
        '<holiday date="2027-01-01"/></calendar>'
    )
    (tmp_path / "w.xml").write_text(document(calendar))
    [fr] = load(tmp_path / "w.xml").calendars
    assert date(2026, 4, 6) in fr.calendar.holidays and date(2027, 1, 1) in fr.calendar.holidays
    assert excluded(fr, CHRISTMAS) == "not in calendar FR: 2026-12-25 is a holiday"


def test_a_holiday_file_that_cannot_be_read_or_holds_a_bad_date_is_reported_at_the_calendar(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.txt").write_text("2026-12-25\n2026-13-01\n")
    calendars = ('<calendar name="A" holidays="missing.txt"/>', '<calendar name="B" holidays="bad.txt"/>')
    (tmp_path / "w.xml").write_text(document(*calendars, jobs=JOBS.replace('calendar="FR"', 'calendar="A"')))
    with pytest.raises(DefinitionError) as caught:
        load(tmp_path / "w.xml")
    [missing, bad] = [(p.line, p.message) for p in caught.value.problems]
    assert missing == (
        2,
        f"calendar 'A': cannot read holiday file {tmp_path}/missing.txt: No such file or directory",
    )
    assert bad[0] == 3 and bad[1].startswith(f"calendar 'B': {tmp_path}/bad.txt:2: ")
