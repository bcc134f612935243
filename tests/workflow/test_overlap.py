"""``<workflow max-active="N" overlap="...">``: read, checked at its line, part of the version, and
carried to the coordinator in APPL_START's DEPLOY entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.envelope import Control, parse_deploy
from tests.workflow.test_cli import wfm
from wfm.workflow import DefinitionError, Job, Workflow, loads, translate
from workflow_messages.overlap import Overlap

JOBS = (
    '<job name="A" agent="a"><command>run a</command></job>\n'
    '<job name="B" agent="b"><after job="A"/><command>b</command></job>'
)


def document(attributes: str) -> str:
    return f'<workflow name="W" {attributes}>\n{JOBS}\n</workflow>'


@pytest.mark.parametrize(
    ("attributes", "overlap"),
    [
        ('max-active="2"', Overlap(2, "queue")),  # queue unless said
        ('max-active="1" overlap="skip"', Overlap(1, "skip")),
        ('max-active="3" overlap="cancel"', Overlap(3, "cancel")),
        ("", None),  # unlimited, as before
    ],
)
def test_the_limit_and_policy_are_read(attributes: str, overlap: Overlap | None) -> None:
    assert loads(document(attributes)).overlap == overlap


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ('max-active="0"', "workflow 'W': max-active must be an integer from 1 to 10000, not '0'"),
        ('max-active="two"', "workflow 'W': max-active must be an integer from 1 to 10000, not 'two'"),
        ('max-active="-1"', "workflow 'W': max-active must be an integer from 1 to 10000, not '-1'"),
        (
            'max-active="1" overlap="later"',
            "workflow 'W': overlap must be one of queue, skip, cancel, not 'later'",
        ),
        ('overlap="skip"', "workflow 'W': overlap='skip' needs max-active=\"N\" (the limit)"),
    ],
)
def test_a_bad_setting_is_reported_at_the_workflows_line(attributes: str, message: str) -> None:
    with pytest.raises(DefinitionError) as error:
        loads(f"<!-- a comment first -->\n{document(attributes)}")
    assert [(p.line, p.message) for p in error.value.problems] == [(2, message)]


def test_a_workflow_built_in_code_is_checked_the_same_way() -> None:
    with pytest.raises(DefinitionError, match="workflow 'W': max-active must be an integer"):
        Workflow("W", (Job("A", "a", "x"),), overlap=Overlap(0))


def test_the_setting_is_part_of_the_version_and_travels_in_appl_starts_entry() -> None:
    plain, limited = loads(document("")), loads(document('max-active="2" overlap="skip"'))
    assert plain.version() == Workflow("W", plain.jobs).version()  # without it: the version it had
    assert limited.version() != plain.version() != loads(document('max-active="2"')).version()
    plan = translate(limited)
    contents = [json.loads(e.content) for e in plan.envelopes]
    entries = {entry["job"]: entry for content in contents for entry in content["jobs"]}
    assert entries["APPL_START"]["overlap"] == {"max_active": 2, "policy": "skip"}
    assert all("overlap" not in entry for job, entry in entries.items() if job != "APPL_START")
    [start] = [
        i
        for i in parse_deploy(Control("W", plan.version, "DEPLOY", "*", plan.envelopes[0].content)).jobs
        if i.job == "APPL_START"
    ]
    assert start.overlap == Overlap(2, "skip")


def test_validate_says_the_setting(tmp_path: Path) -> None:
    (tmp_path / "w.xml").write_text(document('max-active="2" overlap="skip"'))
    done = wfm("validate", "w.xml", cwd=tmp_path)
    assert done.returncode == 0
    assert (
        done.stdout.splitlines()[1]
        == "  at most 2 generations at once; a Trigger beyond is skipped (overlap=skip)"
    )
    done = wfm("validate", "w.xml", "-o", "json", cwd=tmp_path)
    assert json.loads(done.stdout)["overlap"] == {"max_active": 2, "policy": "skip"}
