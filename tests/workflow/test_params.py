"""``<param>`` declarations: read, checked with their lines, part of the version and of every
agent's DEPLOY content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wfm.workflow import DefinitionError, Job, Workflow, load, loads, translate
from wfm.workflow.model import Param

JOBS = '<job name="A" agent="agentA"><command>echo "$WFM_PARAM_REGION"</command></job>'


def document(*params: str) -> str:
    return '<workflow name="W">\n' + "\n".join(params) + "\n" + JOBS + "\n</workflow>\n"


def test_declarations_are_read_in_order_with_their_types_and_defaults() -> None:
    workflow = loads(
        document(
            '<param name="REGION" default="eu"/>',
            '<param name="LIMIT" type="int" default="007"/>',
            '<param name="DAY" type="date"/>',
            '<param name="DRY_RUN" type="bool" default="no"/>',
            '<param name="RATE" type="float" default="2"/>',
        )
    )
    assert workflow.params == (
        Param("REGION", "string", "eu"),
        Param("LIMIT", "int", "7"),  # written canonically
        Param("DAY", "date"),  # no default: required
        Param("DRY_RUN", "bool", "false"),
        Param("RATE", "float", "2.0"),
    )
    assert [p.line for p in workflow.params] == [2, 3, 4, 5, 6]


def test_every_bad_declaration_is_reported_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "w.xml"
    path.write_text(
        document(
            '<param name="REGION" default="eu"/>',
            '<param name="9LIVES"/>',
            '<param name="REGION" type="int"/>',
            '<param name="K" type="blob"/>',
            '<param name="N" type="int" default="many"/>',
            '<param name="WHEN" type="date" default="2026-13-01"/>',
        )
    )
    with pytest.raises(DefinitionError) as caught:
        load(path)
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (
            3,
            "invalid parameter name '9LIVES': a letter or _, then up to 63 letters, digits and _"
            " (jobs see it as WFM_PARAM_NAME)",
        ),
        (4, "duplicate param 'REGION' (first on line 2)"),
        (5, "param 'K': type 'blob' is not one of string, int, float, bool, date"),
        (6, "param 'N': default 'many' is not an integer"),
        (7, "param 'WHEN': default '2026-13-01' is not a date YYYY-MM-DD"),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '<workflow name="W">' + JOBS + '<param name="LATE"/></workflow>',
            (
                1,
                "unexpected <param> (a workflow declares its <param> elements first,"
                " before its calendars and jobs)",
            ),
        ),
        (
            '<workflow name="W"><param type="int"/>' + JOBS + "</workflow>",
            (1, "<param> needs a 'name' attribute"),
        ),
        (
            '<workflow name="W"><param name="A" kind="int"/>' + JOBS + "</workflow>",
            (1, "unknown attribute 'kind' on <param>"),
        ),
        ('<workflow name="W"><param name="A"/></workflow>', (1, "<workflow> needs at least one <job>")),
    ],
)
def test_a_param_of_the_wrong_shape_is_a_schema_error(text: str, problem: tuple[int, str]) -> None:
    with pytest.raises(DefinitionError) as caught:
        loads(text)
    assert [(p.line, p.message) for p in caught.value.problems] == [problem]


def test_a_workflow_built_in_code_is_checked_the_same() -> None:
    job = Job("A", "agentA", "true")
    with pytest.raises(DefinitionError, match="param 'N': default 'x' is not an integer"):
        Workflow("W", (job,), params=(Param("N", "int", "x"),))
    with pytest.raises(DefinitionError, match="is not written canonically"):
        Workflow("W", (job,), params=(Param("N", "int", "01"),))


def test_declarations_change_the_version_and_travel_in_every_deploy_content() -> None:
    job = Job("A", "agentA", "true")
    job_b = Job("B", "agentB", "true", after=())
    plain = Workflow("W", (job, job_b))
    declared = Workflow("W", (job, job_b), params=(Param("REGION", "string", "eu"),))
    other = Workflow("W", (job, job_b), params=(Param("REGION", "string", "us"),))
    assert len({plain.version(), declared.version(), other.version()}) == 3
    for envelope in translate(declared).envelopes:
        assert json.loads(envelope.content)["params"] == [
            {"name": "REGION", "type": "string", "default": "eu"}
        ]
    for envelope in translate(plain).envelopes:
        assert "params" not in json.loads(envelope.content)  # as before parameters: the same plan
