"""The workflow layer's default access rules (wfm.security.acl), and an ACL file on top of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.language import parse_filter, parse_publication
from broker.routing.acl import AccessPolicyError
from wfm.security.acl import load_policy


def test_the_workflow_defaults_keep_envelopes_between_deployer_and_their_agent() -> None:
    policy = load_policy()
    ctl = parse_filter("[class,eq,AGENT_CTL],[agentname,eq,a1]")
    assert policy.may_subscribe("a1", "agent", ctl) is None
    assert policy.may_subscribe("a2", "agent", ctl) is not None
    assert policy.may_subscribe("m", "client", ctl) is not None
    assert policy.may_subscribe("h", "monitor", ctl) is None  # the historian keeps them
    assert policy.may_advertise("m", "client", parse_filter("[class,eq,AGENT_CTL]")) is not None
    assert policy.may_advertise("d", "deployer", parse_filter("[class,eq,AGENT_CTL]")) is None
    status = parse_publication("[class,JOBSTATUS],[agentname,a2],[GID,g1]")
    assert policy.may_publish("a1", "agent", status, 0.0) is not None
    assert policy.may_publish("a2", "agent", status, 0.0) is None


def test_an_acl_file_replaces_the_roles_it_names(tmp_path: Path) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text('[roles.monitor]\nsubscribe = ["[class,eq,JOBSTATUS]"]\n')
    policy = load_policy(acl)
    assert policy.may_subscribe("m", "monitor", parse_filter("[class,eq,Trigger]")) is not None
    assert policy.may_subscribe("a1", "agent", parse_filter("[class,eq,Trigger]")) is None  # default kept
    acl.write_text("[roles.monitor]\nsubscribe = 3\n")
    with pytest.raises(AccessPolicyError, match=f"{acl}: roles.monitor.subscribe must be a list"):
        load_policy(acl)


def test_only_operators_read_the_agents_answers_and_the_queries() -> None:
    """A log tail or a job's command is the operators': a client may not subscribe to answers or
    queries, while the roles the wfm commands and wfm web run as (deployer, monitor) may."""
    policy = load_policy()
    for cls in ("AGENT_ANSWER", "AGENT_QUERY"):
        wanted = parse_filter(f"[class,eq,{cls}]")
        assert policy.may_subscribe("c", "client", wanted) is not None
        assert (
            policy.may_subscribe("c", "client", parse_filter(f"[class,eq,{cls}],[request,eq,r1]")) is not None
        )
        assert policy.may_subscribe("d", "deployer", wanted) is None
        assert policy.may_subscribe("m", "monitor", wanted) is None
    assert policy.may_subscribe("a1", "agent", parse_filter("[class,eq,AGENT_QUERY]")) is None
    assert policy.may_subscribe("c", "client", parse_filter("[class,eq,JOBSTATUS]")) is None


PUBLISHES = {  # role -> (publication, may it?) as identity "me"
    "operator": [
        ("[class,Trigger],[applname,W]", True),
        ("[class,AGENT_CTL],[agentname,a1]", True),  # agents take only CANCEL and RERUN from it
        ("[class,HISTORY_QUERY],[asker,me]", True),
        ("[class,HISTORY_QUERY],[asker,you]", False),
        ("[class,JOBSTATUS],[agentname,a1]", False),
        ("[class,HISTORY_RESULT],[asker,you]", False),
    ],
    "scheduler": [
        ("[class,Trigger],[applname,W]", True),
        ("[class,AGENT_CTL],[agentname,a1]", False),
        ("[class,HISTORY_QUERY],[asker,me]", False),
    ],
    "historian": [
        ("[class,HISTORY_RESULT],[asker,you]", True),
        ("[class,Trigger],[applname,W]", False),
        ("[class,JOBSTATUS],[agentname,me]", False),
    ],
    "monitor": [
        ("[class,HISTORY_QUERY],[asker,me]", True),
        ("[class,HISTORY_QUERY],[asker,you]", False),
        ("[class,HISTORY_RESULT],[asker,you]", False),  # only a historian answers
        ("[class,Trigger],[applname,W]", False),
        ("[class,AGENT_CTL],[agentname,a1]", False),
    ],
    "client": [
        ("[class,HISTORY_QUERY],[asker,me]", True),
        ("[class,HISTORY_QUERY],[asker,you]", False),
        ("[class,HISTORY_RESULT],[asker,me]", False),
        ("[class,Trigger],[applname,W]", False),
        ("[class,JOBSTATUS],[agentname,me]", False),
    ],
    "agent": [
        ("[class,JOBSTATUS],[agentname,me]", True),
        ("[class,JOBSTATUS],[agentname,you]", False),  # no agent speaks for another
        ("[class,Trigger],[applname,W]", False),
    ],
}


@pytest.mark.parametrize(
    ("role", "text", "allowed"), [(r, t, a) for r, cases in PUBLISHES.items() for t, a in cases]
)
def test_each_role_publishes_what_its_row_in_security_md_says(role: str, text: str, allowed: bool) -> None:
    reason = load_policy().may_publish("me", role, parse_publication(text), 0.0)
    assert (reason is None) == allowed, reason


def test_answers_to_history_questions_reach_only_the_asker() -> None:
    policy = load_policy()
    mine = parse_filter("[class,eq,HISTORY_RESULT],[query,eq,q],[asker,eq,me]")
    anyones = parse_filter("[class,eq,HISTORY_RESULT],[query,eq,q]")
    assert policy.may_subscribe("me", "client", mine) is None
    assert policy.may_subscribe("me", "client", anyones) is not None
    assert policy.may_subscribe("me", "client", parse_filter("[class,eq,HISTORY_RESULT],[asker,eq,you]"))
    assert (
        policy.may_subscribe("s", "scheduler", parse_filter("[class,eq,JOBSTATUS],[jobname,eq,APPL_START]"))
        is None
    )
    assert policy.may_subscribe("s", "scheduler", parse_filter("[class,eq,AGENT_CTL]")) is not None


def test_a_client_sees_no_ones_history_questions() -> None:
    """Else it could read another's question id and ask first under it."""
    assert load_policy().may_subscribe("me", "client", parse_filter("[class,eq,HISTORY_QUERY]")) is not None
