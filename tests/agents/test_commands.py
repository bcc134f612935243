"""An envelope's command, read once into a typed record: what the agent's handlers act on."""

from __future__ import annotations

import json

import pytest

from agents.commands import Cancel, Rerun, Undeploy, WantRegistration, read_command, read_envelope
from agents.envelope import Control, parse_jobinfo
from workflow_messages import retire_content, withdraw_content
from workflow_messages.operations import CANCEL, RERUN, operation


def test_an_operation_is_read_with_its_content_checked() -> None:
    cancel = read_envelope(operation("a1", "W", CANCEL, {"gid": "g1"}), "a1")
    assert isinstance(cancel, Cancel) and cancel.gid == "g1"
    rerun = read_envelope(operation("a1", "W", RERUN, {"gid": "g1", "new": "g2", "reuse": ["A"]}), "a1")
    assert isinstance(rerun, Rerun) and (rerun.gid, rerun.new, rerun.reuse) == ("g1", "g2", ("A",))
    with pytest.raises(ValueError, match="addressed to 'a1', not 'a2'"):
        read_envelope(operation("a1", "W", CANCEL, {"gid": "g1"}), "a2")


@pytest.mark.parametrize(
    ("content", "order"),
    [("", None), (retire_content(["v2", "v1"]), ("v1", "v2")), (withdraw_content(), True)],
)
def test_an_undeploy_removes_everything_retires_the_versions_it_names_or_withdraws_its_own(
    content: str, order: tuple[str, ...] | bool | None
) -> None:
    command = read_command(Control("W", "v3", "UNDEPLOY", "*", content))
    assert command == Undeploy(Control("W", "v3", "UNDEPLOY", "*", content), order)


@pytest.mark.parametrize(
    "content", ['{"withdraw": false}', '{"withdraw": true, "retire": ["v1"]}', '{"x": 1}']
)
def test_an_undeploy_that_asks_for_something_else_is_refused_in_one_line(content: str) -> None:
    with pytest.raises(ValueError, match="must be empty or a retire list") as refused:
        read_command(Control("W", "v3", "UNDEPLOY", "*", content))
    assert "\n" not in str(refused.value)


def test_a_registration_is_read_into_its_filter() -> None:
    command = read_command(Control("W", "v1", "ADVERTISE", "A", "[class,eq,JOBSTATUS],[applname,eq,W]"))
    assert isinstance(command, WantRegistration) and command.registration.command == "ADVERTISE"
    assert command.registration.filter is not None


@pytest.mark.parametrize(("given", "read"), [({}, 4), ({"priority": 8}, 8)])
def test_a_job_s_priority_is_read_from_its_jobinfo(given: dict[str, int], read: int) -> None:
    content = json.dumps({"workflow": "W", "version": "v1", "job": "A", "command": "x", **given})
    assert parse_jobinfo(Control("W", "v1", "JOBINFO", "A", content)).priority == read


@pytest.mark.parametrize("priority", [10, -1, True, "9"])
def test_a_bad_priority_is_refused_in_one_line(priority: object) -> None:
    content = json.dumps({"workflow": "W", "version": "v1", "job": "A", "command": "x", "priority": priority})
    with pytest.raises(ValueError, match="JOBINFO priority must be an integer from 0 to 9"):
        parse_jobinfo(Control("W", "v1", "JOBINFO", "A", content))
