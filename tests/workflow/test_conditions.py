"""``<wait>`` and ``<event>`` in a definition: read, checked at their lines (an event's filter with
the language's own parser), and carried in the job's DEPLOY entry."""

from __future__ import annotations

import json

import pytest

from wfm.workflow import DefinitionError, Job, Workflow, loads, translate
from wfm.workflow.model import Event, Wait

DOCUMENT = """<workflow name="BILLING">
  <job name="Invoice" agent="agentB">
    <wait workflow="LEDGER" job="Close"/>
    <wait workflow="LEDGER" job="Audit" on="always" date="prev"/>
    <event filter="[class,eq,'FILE_ARRIVED'],[path,eq,'/in/x.csv']"/>
    <command>bill</command>
  </job>
</workflow>
"""


def test_conditions_are_read_in_document_order_with_their_defaults() -> None:
    [job] = loads(DOCUMENT).jobs
    assert job.conditions == (
        Wait("LEDGER", "Close", "success", "same"),
        Wait("LEDGER", "Audit", "always", "prev"),
        Event("[class,eq,'FILE_ARRIVED'],[path,eq,'/in/x.csv']"),
    )
    assert [c.line for c in job.conditions] == [3, 4, 5]


def test_the_deploy_entry_carries_them_and_they_are_part_of_the_version() -> None:
    workflow = loads(DOCUMENT)
    [envelope] = translate(workflow).envelopes
    [entry] = [e for e in json.loads(envelope.content)["jobs"] if e["job"] == "Invoice"]
    assert entry["conditions"] == [
        {"wait": ["LEDGER", "Close"], "on": "success", "date": "same"},
        {"wait": ["LEDGER", "Audit"], "on": "always", "date": "prev"},
        {"event": "[class,eq,'FILE_ARRIVED'],[path,eq,'/in/x.csv']"},
    ]
    plain = Workflow("BILLING", (Job("Invoice", "agentB", "bill"),))
    assert "conditions" not in json.dumps([json.loads(e.content) for e in translate(plain).envelopes])
    assert plain.version() != workflow.version()


@pytest.mark.parametrize(
    ("element", "message"),
    [
        (
            '<wait workflow="LEDGER" job="Close" date="tomorrow"/>',
            "job 'Invoice': <wait> date must be same, prev, -N (days before, at most 366) or a date"
            " YYYY-MM-DD, not 'tomorrow'",
        ),
        ('<wait workflow="LEDGER" job="Close" date="-400"/>', "not '-400'"),
        ('<wait workflow="LEDGER" job="Close" on="maybe"/>', "<wait> on='maybe' is not one of success"),
        ('<wait workflow="LED GER" job="Close"/>', "<wait> workflow 'LED GER' is not a valid name"),
        ('<wait workflow="LEDGER"/>', "<wait> needs a 'job' attribute"),
        (
            "<event filter=\"[class,eq,'F'],[path,eqq,'/in']\"/>",
            "<event> filter \"[class,eq,'F'],[path,eqq,'/in']\": unknown operator 'eqq' at column 22",
        ),
        ("<event filter=\"[class,eq,'F'],[time,>,now-1h]\"/>", "an event filter cannot use 'time'"),
        ("<event filter=\"[class,eq,'F'],[n,eq,$S$X]\"/>", "<event> filter"),
    ],
)
def test_a_bad_condition_is_refused_at_its_line(element: str, message: str) -> None:
    document = (
        '<workflow name="BILLING">\n<job name="Invoice" agent="a">\n<after job="A"/>\n'
        f"{element}\n<command>x</command></job>\n"
        '<job name="A" agent="a"><command>x</command></job></workflow>'
    )
    with pytest.raises(DefinitionError) as caught:
        loads(document)
    [problem] = caught.value.problems
    assert problem.line == 4 and message in problem.message


def test_a_condition_twice_and_one_out_of_place_are_refused() -> None:
    twice = DOCUMENT.replace(
        '<wait workflow="LEDGER" job="Audit" on="always" date="prev"/>',
        '<wait workflow="LEDGER" job="Close"/>',
    )
    with pytest.raises(DefinitionError) as caught:
        loads(twice)
    assert [(p.line, p.message) for p in caught.value.problems] == [
        (4, "job 'Invoice' waits for LEDGER.Close twice (first on line 3)")
    ]
    misplaced = DOCUMENT.replace(
        "<command>bill</command>", "<command>bill</command><event filter='[class,eq,x]'/>"
    )
    with pytest.raises(DefinitionError) as caught:
        loads(misplaced)
    assert (
        "unexpected <event> (a job holds its <after> elements, then its <wait> and <event> elements"
        in str(caught.value)
    )
