"""The workflow layer's default access rules (wfm.security.acl), and an ACL file on top of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.language import parse_filter, parse_publication
from broker.routing.acl import PolicyError
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
    with pytest.raises(PolicyError, match=f"{acl}: roles.monitor.subscribe must be a list"):
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
