"""``wfm validate`` and ``wfm deploy`` as a user runs them, and the golden plans of workflows/.

The golden files are ``wfm deploy workflows/NAME.xml --dry-run -o json`` with the absolute path of
workflows/ (it appears as JOBINFO's "cwd") replaced by ``<WORKFLOWS>``. After a deliberate change of
the plan format, regenerate them with ``WFM_UPDATE_GOLDEN=1 .venv/bin/pytest tests/workflow`` and
review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.language import Publication, parse_publication
from tests.processes import WFM
from wfm.signing import local_deployer
from workflow_messages.signature import check_signature

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
GOLDEN = Path(__file__).with_name("golden")
SIGNATURE_FIELDS = ("sequence", "signer", "signature")


def wfm(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [WFM, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env={**os.environ, **env}
    )
    assert "Traceback" not in done.stderr
    return done


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.xml")), ids=lambda p: p.stem)
def test_golden_plans(path: Path, tmp_path: Path) -> None:
    """The golden files hold the envelopes unsigned: each sequence and signature is new."""
    key = tmp_path / "deployer.key"
    deployer = local_deployer(key)
    done = wfm("deploy", f"workflows/{path.name}", "--dry-run", "-o", "json", "--key", str(key))
    assert (done.returncode, done.stderr) == (0, "")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    sequences = []
    for record in records:
        assert list(record) == ["agent", "command", "job", "content", "publication"]
        publication = parse_publication(record["publication"])
        assert (publication["agentname"], publication["content"]) == (record["agent"], record["content"])
        assert check_signature(publication).key == deployer.signer.key.public_key()
        sequences.append(publication["sequence"])
        unsigned = {name: value for name, value in publication.fields.items() if name not in SIGNATURE_FIELDS}
        record["publication"] = str(Publication(publication.cls, unsigned))
    assert sequences == sorted(set(sequences))  # each above the one before
    plan = "\n".join(json.dumps(record, ensure_ascii=False) for record in records) + "\n"
    plan = plan.replace(str(WORKFLOWS), "<WORKFLOWS>")
    golden = GOLDEN / f"{path.stem}.json"
    if os.environ.get("WFM_UPDATE_GOLDEN"):
        golden.write_text(plan)
    assert plan == read_golden(golden, path), (
        f"plan of {path.name} changed: if that is meant, {UPDATE} -k {path.stem}, and review the diff"
    )


UPDATE = "regenerate its golden plan with WFM_UPDATE_GOLDEN=1 .venv/bin/pytest tests/workflow"


def read_golden(golden: Path, workflow: Path) -> str:
    """The golden plan of ``workflow``; a failure saying how to make it when there is none."""
    if not golden.exists():
        pytest.fail(
            f"{workflow.name} has no golden plan {golden.name} in {golden.parent}: {UPDATE}"
            f" -k {workflow.stem}, review it and commit it"
        )
    return golden.read_text()


def golden_problems(workflows: Path, golden: Path) -> list[str]:
    """What is wrong between the workflow files and their golden plans, said so that whoever
    added (or removed) a workflow knows what to do."""
    plans = {p.stem for p in golden.glob("*.json")}
    files = {p.stem: p for p in workflows.glob("*.xml")}
    return [
        *(
            f"{files[name].name} has no golden plan {name}.json in {golden}: {UPDATE} -k {name},"
            " review it and commit it"
            for name in sorted(set(files) - plans)
        ),
        *(
            f"{golden / name}.json is the plan of no workflow: remove it"
            for name in sorted(plans - set(files))
        ),
    ]


def test_every_workflow_has_a_golden_plan() -> None:
    problems = golden_problems(WORKFLOWS, GOLDEN)
    assert not problems, "\n".join(problems)


def test_a_workflow_added_without_a_golden_plan_is_told_what_to_do(tmp_path: Path) -> None:
    """The two failures a new workflows/NEW.xml caused said only that two lists differ, and that
    a file was not found."""
    workflows, golden = tmp_path / "workflows", tmp_path / "golden"
    workflows.mkdir()
    golden.mkdir()
    (workflows / "payroll.xml").touch()
    (workflows / "new.xml").touch()
    (golden / "payroll.json").touch()
    (golden / "old.json").touch()
    assert golden_problems(workflows, golden) == [
        f"new.xml has no golden plan new.json in {golden}: regenerate its golden plan with"
        " WFM_UPDATE_GOLDEN=1 .venv/bin/pytest tests/workflow -k new, review it and commit it",
        f"{golden}/old.json is the plan of no workflow: remove it",
    ]
    with pytest.raises(
        pytest.fail.Exception, match=r"new.xml has no golden plan new.json in .*WFM_UPDATE_GOLDEN=1"
    ):
        read_golden(golden / "new.json", workflows / "new.xml")


def test_validate_ok() -> None:
    done = wfm("validate", "workflows/payroll.xml")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "workflows/payroll.xml: ok (5 jobs, agents agentA, agentB, agentC)\n",
        "",
    )


def test_validate_lists_every_problem(tmp_path: Path) -> None:
    (tmp_path / "bad.xml").write_text(
        '<workflow name="W">\n<job name="A" agent="a" schedule="fryday"><command>x</command></job>\n'
        '<job name="B"><after job="Z"/><command>x</command></job>\n</workflow>\n'
    )
    done = wfm("validate", "bad.xml", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "bad.xml:2: job 'A': unknown schedule word 'fryday' (use daily, workdays, weekends or a comma list "
        "of mon tue wed thu fri sat sun)",
        "bad.xml:3: job 'B' has no agent",
        "bad.xml:3: job 'B' is after unknown job 'Z'",
    ]


def test_deploy_names_the_first_problem_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.xml").write_text('<workflow name="W">\n<job name="A"><command>x</command></job>\n')
    done = wfm("deploy", "bad.xml", "--dry-run", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("wfm: error: bad.xml:3: XML syntax error: ")
    assert done.stderr.count("\n") == 1
    (tmp_path / "bad.xml").write_text(
        '<workflow name="W">\n<job name="A"><after job="A"/><command/></job>\n</workflow>'
    )
    done = wfm("deploy", "bad.xml", "--dry-run", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "wfm: error: bad.xml:2: job 'A' has no agent (and 2 more: wfm validate bad.xml)\n"


def test_deploy_without_a_reachable_broker_is_one_line() -> None:
    done = wfm("deploy", "workflows/payroll.xml", WFM_BROKER="socket://127.0.0.1:1/B1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("wfm: error: cannot deploy through socket://127.0.0.1:1/B1: ")
    assert done.stderr.count("\n") == 1


def test_deploy_needs_a_broker() -> None:
    done = wfm("deploy", "workflows/payroll.xml", WFM_BROKER="")
    assert (done.returncode, done.stderr) == (1, "wfm: error: no broker: give --broker or set WFM_BROKER\n")


def test_deploy_text_lists_each_agent() -> None:
    done = wfm("deploy", "workflows/payroll.xml", "--dry-run")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("PAYROLL version ") and lines[0].endswith(": 5 jobs, coordinator agentA")
    assert [line for line in lines if line and not line.startswith(" ")][2:] == ["agentA", "agentB", "agentC"]
    assert sum("DEPLOY" in line for line in lines) == 3  # one envelope per agent


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["validate", "nowhere.xml"], "does not exist"),
        (
            ["deploy", "workflows/payroll.xml", "--dry-run", "--broker", "tcp://x"],
            "Invalid value for '--broker'",
        ),
        (["deploy", "workflows", "--dry-run"], "is a directory"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], fragment: str) -> None:
    done = wfm(*args)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("wfm: error: ") and fragment in done.stderr


def test_validate_several_files_fails_if_one_does(tmp_path: Path) -> None:
    shutil.copy(ROOT / "workflows" / "payroll.xml", tmp_path)
    (tmp_path / "bad.xml").write_text(
        '<workflow name="W">\n<job name="B"><command>x</command></job>\n</workflow>\n'
    )
    done = wfm("validate", "payroll.xml", "bad.xml", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == "payroll.xml: ok (5 jobs, agents agentA, agentB, agentC)\n"
    assert done.stderr == "bad.xml:2: job 'B' has no agent\n"
    done = wfm("validate", "payroll.xml", "bad.xml", "-o", "json", cwd=tmp_path)
    assert done.returncode == 1
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {
            "file": "payroll.xml",
            "ok": True,
            "workflow": "PAYROLL",
            "jobs": 5,
            "agents": ["agentA", "agentB", "agentC"],
            "problems": [],
        },
        {"file": "bad.xml", "ok": False, "problems": [{"line": 2, "message": "job 'B' has no agent"}]},
    ]
