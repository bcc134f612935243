"""Reading workflow XML: every problem is reported, each at its line, in plain words."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.messages import Publish
from broker.transport import MAX_FRAME, encode
from wfm.workflow import After, DefinitionError, Job, Workflow, load, loads, translate
from wfm.workflow.checks import MAX_COMMAND

JOB_A = '<job name="A" agent="a"><command>run a</command></job>'

# (name, document, [(line, message), ...]): all problems of the document, in order
CASES = [
    (
        "xml syntax",
        '<workflow name="W">\n<job name="A"\n</workflow>',
        [(3, "XML syntax error: error parsing attribute name")],
    ),
    ("not xml", "", [(1, "XML syntax error: Document is empty")]),
    ("wrong root", '<flow name="W"/>', [(1, "the root element must be <workflow>, not <flow>")]),
    ("no jobs", '<workflow name="W">\n</workflow>', [(1, "<workflow> needs at least one <job>")]),
    (
        "no command",
        '<workflow name="W">\n<job name="A" agent="a">\n<after job="B"/></job>\n</workflow>',
        [(2, "<job> needs a <command>")],
    ),
    (
        "two commands",
        f'<workflow name="W">\n{JOB_A}\n<job name="B" agent="a"><command>x</command>\n'
        "<command>y</command></job></workflow>",
        [
            (
                4,
                "unexpected <command> (a job holds its <after> elements,"
                " then one <command> or one <approval>)",
            )
        ],
    ),
    (
        "after after command",
        f'<workflow name="W">\n{JOB_A}\n<job name="B" agent="a"><command>x</command>\n'
        '<after job="A"/></job></workflow>',
        [(4, "unexpected <after> (a job holds its <after> elements, then one <command> or one <approval>)")],
    ),
    (
        "schema problems together",
        '<workflow name="W" owner="me">\n<job agent="a"><command>x</command></job>\n<task/>\n</workflow>',
        [
            (1, "unknown attribute 'owner' on <workflow>"),
            (2, "<job> needs a 'name' attribute"),
            (3, "unexpected element <task> (expected <job>)"),
        ],
    ),
    (
        "text in job",
        '<workflow name="W">\n<job name="A" agent="a">hello<command>x</command></job>\n</workflow>',
        [(2, "<job> cannot contain text")],
    ),
    (
        "unknown predecessor",
        f'<workflow name="W">\n{JOB_A}\n<job name="B" agent="a">\n<after job="Z"/>\n'
        "<command>x</command></job></workflow>",
        [(4, "job 'B' is after unknown job 'Z'")],
    ),
    (
        "cycle",
        '<workflow name="W">\n' + JOB_A + "\n"
        '<job name="B" agent="a"><after job="C"/><command>x</command></job>\n'
        '<job name="C" agent="a"><after job="B"/><command>x</command></job>\n</workflow>',
        [(3, "cycle B -> C -> B")],
    ),
    (
        "longer cycle and its downstream",
        '<workflow name="W">\n' + JOB_A + "\n"
        '<job name="B" agent="a"><after job="A"/><after job="D"/><command>x</command></job>\n'
        '<job name="C" agent="a"><after job="B"/><command>x</command></job>\n'
        '<job name="D" agent="a"><after job="C"/><command>x</command></job>\n'
        '<job name="E" agent="a"><after job="D"/><command>x</command></job>\n</workflow>',
        [(3, "cycle B -> C -> D -> B")],
    ),
    (
        "duplicate job",
        f'<workflow name="W">\n{JOB_A}\n{JOB_A}\n</workflow>',
        [(3, "duplicate job 'A' (first on line 2)")],
    ),
    (
        "missing and empty agent",
        '<workflow name="W">\n<job name="A"><command>x</command></job>\n'
        '<job name="B" agent=""><command>x</command></job>\n</workflow>',
        [(2, "job 'A' has no agent"), (3, "job 'B' has no agent")],
    ),
    (
        "bad schedule word",
        '<workflow name="W">\n<job name="A" agent="a" schedule="mon,fryday">'
        "<command>x</command></job>\n</workflow>",
        [
            (
                2,
                "job 'A': unknown schedule word 'fryday' (use daily, workdays, weekends or a comma list of "
                "mon tue wed thu fri sat sun)",
            )
        ],
    ),
    (
        "bad numbers",
        '<workflow name="W">\n<job name="A" agent="a" timeout="0" retries="-1" priority="10">'
        '<command>x</command></job>\n<job name="B" agent="a" timeout="soon" retries="1.5" priority="high">'
        "<command>x</command></job>\n</workflow>",
        [
            (2, "job 'A': timeout must be a positive number of seconds, not '0'"),
            (2, "job 'A': retries must be a non-negative integer, not '-1'"),
            (2, "job 'A': priority must be an integer from 0 to 9, not '10'"),
            (3, "job 'B': timeout must be a positive number of seconds, not 'soon'"),
            (3, "job 'B': retries must be a non-negative integer, not '1.5'"),
            (3, "job 'B': priority must be an integer from 0 to 9, not 'high'"),
        ],
    ),
    (
        "duplicate after and after itself",
        f'<workflow name="W">\n{JOB_A}\n<job name="B" agent="a">\n'
        '<after job="A"/>\n<after job="A" on="always"/>\n<after job="B"/>\n<command>x</command></job>\n'
        "</workflow>",
        [(5, "job 'B' is after 'A' twice (first on line 4)"), (6, "job 'B' is after itself")],
    ),
    (
        "bad on",
        f'<workflow name="W">\n{JOB_A}\n<job name="B" agent="a"><after job="A" on="sometimes"/>'
        "<command>x</command></job>\n</workflow>",
        [(3, "job 'B': on='sometimes' is not one of success, failure, always")],
    ),
    (
        "bad names",
        '<workflow name="PAY ROLL">\n<job name="1st" agent="a b"><command>x</command></job>\n'
        '<job name="APPL_START" agent="a"><command> </command></job>\n</workflow>',
        [
            (
                1,
                "workflow name 'PAY ROLL' is not a valid name (letters, digits and _ - : /, "
                "not starting with a digit or -)",
            ),
            (
                2,
                "job name '1st' is not a valid name (letters, digits and _ - : /, "
                "not starting with a digit or -)",
            ),
            (
                2,
                "job '1st': agent 'a b' is not a valid name (letters, digits and _ - : /, not starting with "
                "a digit or -)",
            ),
            (3, "job name 'APPL_START' is reserved for the virtual job of that name"),
            (3, "job 'APPL_START' has an empty command"),
        ],
    ),
    (
        "external entity",
        '<?xml version="1.0"?>\n<!DOCTYPE workflow [\n<!ENTITY x SYSTEM "file:///etc/passwd">\n]>\n'
        '<workflow name="W">\n<job name="A" agent="a"><command>&x;</command></job>\n</workflow>',
        [(2, "a DOCTYPE is not allowed in a workflow definition")],
    ),
    (
        "external dtd",
        f'<!DOCTYPE workflow SYSTEM "http://example.com/w.dtd">\n<workflow name="W">\n{JOB_A}\n</workflow>',
        [(1, "a DOCTYPE is not allowed in a workflow definition")],
    ),
    (
        "entity expansion",
        '<!DOCTYPE workflow [<!ENTITY a "aaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
        '<workflow name="W">\n<job name="A" agent="a"><command>&b;</command></job>\n</workflow>',
        [(1, "a DOCTYPE is not allowed in a workflow definition")],
    ),
]


@pytest.mark.parametrize(("document", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_problem_at_its_line(tmp_path: Path, document: str, expected: list[tuple[int, str]]) -> None:
    path = tmp_path / "w.xml"
    path.write_text(document)
    with pytest.raises(DefinitionError) as caught:
        load(path)
    assert [(p.line, p.message) for p in caught.value.problems] == expected


def test_a_valid_definition(tmp_path: Path) -> None:
    path = tmp_path / "w.xml"
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<!-- c -->\n<workflow name="W">\n'
        '  <job name="A" agent="a" schedule="workdays, sat" timeout="1.5" retries="2">\n'
        "    <command>\n      echo 'it' &amp;&amp; true\n    </command>\n  </job>\n"
        '  <job name="B" agent="b"><after job="A" on="failure"/><after job="C"/><command>x</command></job>\n'
        '  <job name="C" agent="a"><command>y</command></job>\n'
        "</workflow>\n"
    )
    workflow = load(path)
    assert workflow.source == str(path.resolve())
    assert workflow.agents == ("a", "b")
    assert workflow.coordinator == "a"
    first = workflow.jobs[0]
    assert (first.name, first.command, first.weekdays, first.timeout, first.retries, first.line) == (
        "A",
        "echo 'it' && true",
        frozenset({0, 1, 2, 3, 4, 5}),
        1.5,
        2,
        4,
    )
    assert workflow.jobs[1].after == (After("A", "failure"), After("C"))
    assert workflow.jobs[1].after[0].line == 9


def test_built_in_code_is_checked_the_same_way() -> None:
    a = Job("A", "agentA", "x")
    assert Workflow("W", (a,)) == loads(
        '<workflow name="W"><job name="A" agent="agentA"><command>x</command></job></workflow>'
    )
    with pytest.raises(DefinitionError) as caught:
        Workflow(
            "W",
            (a, Job("B", "", "y", frozenset({7}), -1, True, (After("Z"),)), Job("A", "agentA", "z")),
        )
    assert [p.message for p in caught.value.problems] == [
        "duplicate job 'A'",
        "job 'B' has no agent",
        "job 'B': a schedule is a non-empty set of weekdays 0 (Monday) to 6",
        "job 'B': timeout must be a positive number of seconds, not -1",
        "job 'B': retries must be a non-negative integer, not True",
        "job 'B' is after unknown job 'Z'",
    ]
    with pytest.raises(DefinitionError, match="workflow 'W' has no jobs"):
        Workflow("W", ())


def test_a_long_chain_in_code() -> None:
    """The benchmark builds workflows of up to 1000 jobs; a chain must not hit recursion limits."""
    jobs = [Job("J0", "a", "x")] + [
        Job(f"J{i}", "a", "x", after=(After(f"J{i - 1}"),)) for i in range(1, 3000)
    ]
    assert len(Workflow("W", tuple(jobs)).jobs) == 3000
    looped = (Job("J0", "a", "x", after=(After("J2999"),)), *jobs[1:])
    with pytest.raises(DefinitionError) as caught:
        Workflow("W", looped)
    assert [p.message[:20] for p in caught.value.problems] == ["cycle J0 -> J1 -> J2"]


def test_a_command_too_large_for_one_message_is_refused_at_validation(tmp_path: Path) -> None:
    """The limit holds whatever the command's characters: at the limit, every envelope of the plan
    still fits in one frame (quotes and control characters grow six-fold in JSON)."""
    for worst in ("'", "\x01", "\U0001f600"):
        fits = Workflow("W", (Job("A", "a", worst * (MAX_COMMAND // len(worst.encode()))),))
        assert all(len(encode(Publish("1", p))) <= MAX_FRAME for p in translate(fits).publications())
    with pytest.raises(DefinitionError) as caught:
        Workflow("W", (Job("A", "a", "x" * (MAX_COMMAND + 1)),))
    assert [p.message for p in caught.value.problems] == [
        f"job 'A': the command is {MAX_COMMAND + 1} bytes, more than the limit of {MAX_COMMAND}"
        f" (an eighth of the {MAX_FRAME}-byte message limit); run a script instead"
    ]
    path = tmp_path / "w.xml"
    job = f'<job name="A" agent="a"><command>{"x" * 2_000_000}</command></job>'
    path.write_text(f'<workflow name="W">\n{job}</workflow>')
    with pytest.raises(DefinitionError, match="line 2: job 'A': the command is 2000000 bytes"):
        load(path)


def test_a_job_s_priority_is_in_its_definition_only_when_set() -> None:
    """A definition without a priority keeps the version it had before jobs had priorities, and
    so does one that says the default."""
    plain = loads('<workflow name="W"><job name="A" agent="a"><command>x</command></job></workflow>')
    said = loads(
        '<workflow name="W"><job name="A" agent="a" priority="4"><command>x</command></job></workflow>'
    )
    urgent = loads(
        '<workflow name="W"><job name="A" agent="a" priority=" 9 "><command>x</command></job></workflow>'
    )
    assert plain.version() == said.version() != urgent.version()
    assert "priority" not in plain.jobs[0].definition() and urgent.jobs[0].definition()["priority"] == 9
    with pytest.raises(DefinitionError, match="job 'A': priority must be an integer from 0 to 9, not 12"):
        Workflow("W", (Job("A", "a", "x", priority=12),))
