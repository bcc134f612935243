"""An envelope's command, read once into a typed record: what the agent's handlers act on."""

from __future__ import annotations

import pytest

from agents.commands import Cancel, Rerun, Undeploy, WantRegistration, read_command, read_envelope
from agents.envelope import Control
from workflow_messages import retire_content
from workflow_messages.operations import CANCEL, RERUN, operation


def test_an_operation_is_read_with_its_content_checked() -> None:
    cancel = read_envelope(operation("a1", "W", CANCEL, {"gid": "g1"}), "a1")
    assert isinstance(cancel, Cancel) and cancel.gid == "g1"
    rerun = read_envelope(operation("a1", "W", RERUN, {"gid": "g1", "new": "g2", "reuse": ["A"]}), "a1")
    assert isinstance(rerun, Rerun) and (rerun.gid, rerun.new, rerun.reuse) == ("g1", "g2", ("A",))
    with pytest.raises(ValueError, match="addressed to 'a1', not 'a2'"):
        read_envelope(operation("a1", "W", CANCEL, {"gid": "g1"}), "a2")


@pytest.mark.parametrize(("content", "retire"), [("", None), (retire_content(["v2", "v1"]), ("v1", "v2"))])
def test_an_undeploy_removes_everything_or_retires_the_versions_it_names(
    content: str, retire: tuple[str, ...] | None
) -> None:
    command = read_command(Control("W", "v3", "UNDEPLOY", "*", content))
    assert command == Undeploy(Control("W", "v3", "UNDEPLOY", "*", content), retire)


def test_a_registration_is_read_into_its_filter() -> None:
    command = read_command(Control("W", "v1", "ADVERTISE", "A", "[class,eq,JOBSTATUS],[applname,eq,W]"))
    assert isinstance(command, WantRegistration) and command.registration.command == "ADVERTISE"
    assert command.registration.filter is not None
