"""Access control at the edge broker: the policy itself, the router refusing what a client's
role may not do, and a neighbour's publications checked against what it advertised."""

from __future__ import annotations

import pytest

from broker.language import parse_composite, parse_filter, parse_publication
from broker.messages import Advertise, Carry, CompositeSubscribe, LinkUp, Publish, Refuse, Subscribe
from broker.routing.acl import Policy, PolicyError
from broker.routing.router import Router

RULES = """
[roles.agent]
publish = ["[class,eq,STATUS],[agent,eq,$IDENTITY]"]
subscribe = ["[class,eq,CTL],[agent,eq,$IDENTITY]", "[class,eq,STATUS]"]

[roles.client]
publish = ["*"]
subscribe = ["*"]
deny_publish = ["[class,eq,CTL]"]
deny_subscribe = ["[class,eq,CTL]"]

[identities.root]
publish = ["*"]
subscribe = ["*"]
"""


def router(*peers: tuple[str, str, str]) -> Router:
    """B1 with the rules above and clients (hop, identity, role) linked."""
    r = Router("B1", policy=Policy.parse(RULES))
    for hop, identity, role in peers:
        r.handle(LinkUp(broker=False, identity=identity, role=role), hop, 0.0)
    return r


def answer(r: Router, message: object, hop: str) -> object:
    return r.handle(message, hop, 0.0)[0][1]  # type: ignore[arg-type]


def test_an_agent_subscribes_to_its_own_envelopes_only() -> None:
    r = router(("c1", "a1", "agent"))
    own = answer(r, Subscribe("1", parse_filter("[class,eq,CTL],[agent,eq,a1]")), "c1")
    other = answer(r, Subscribe("2", parse_filter("[class,eq,CTL],[agent,eq,a2]")), "c1")
    every = answer(r, Subscribe("3", parse_filter("[class,eq,CTL]")), "c1")
    assert not isinstance(own, Refuse)
    assert isinstance(other, Refuse) and isinstance(every, Refuse)
    assert other.reason == (
        "access denied: a1 (agent) may not subscribe to this: no rule of roles.agent.subscribe "
        "covers [class,eq,CTL],[agent,eq,a2]"
    )
    assert r.counters["refused.acl"] == 2


def test_every_atom_of_a_composite_must_be_allowed() -> None:
    r = router(("c1", "a1", "agent"))
    allowed = "{[class,eq,STATUS],[x,eq,$S$X]}&{[class,eq,CTL],[agent,eq,a1],[x,eq,$S$X]}"
    sneaky = "{[class,eq,STATUS],[x,eq,$S$X]}&{[class,eq,CTL],[x,eq,$S$X]}"
    assert not isinstance(answer(r, CompositeSubscribe("1", parse_composite(allowed)), "c1"), Refuse)
    refused = answer(r, CompositeSubscribe("2", parse_composite(sneaky)), "c1")
    assert isinstance(refused, Refuse) and "covers [class,eq,CTL],[x,eq,$S$X]" in refused.reason


def test_an_agent_publishes_only_as_itself() -> None:
    r = router(("c1", "a1", "agent"))
    answer(r, Advertise("ad", parse_filter("[class,eq,STATUS],[agent,isPresent,'']")), "c1")
    mine = answer(r, Publish("1", parse_publication("[class,STATUS],[agent,a1]")), "c1")
    forged = answer(r, Publish("2", parse_publication("[class,STATUS],[agent,a2]")), "c1")
    assert not isinstance(mine, Refuse)
    assert isinstance(forged, Refuse) and "no rule of roles.agent.publish allows it" in forged.reason


def test_a_client_may_not_advertise_or_subscribe_the_control_class(caplog: pytest.LogCaptureFixture) -> None:
    r = router(("c1", "mallory", "client"))
    ad = answer(r, Advertise("1", parse_filter("[class,eq,CTL],[agent,isPresent,'']")), "c1")
    sub = answer(r, Subscribe("2", parse_filter("[class,eq,CTL],[agent,eq,a1]")), "c1")
    fine = answer(r, Subscribe("3", parse_filter("[class,eq,stock]")), "c1")
    assert isinstance(ad, Refuse) and "roles.client.deny_publish [class,eq,CTL] forbids it" in ad.reason
    assert isinstance(sub, Refuse) and "deny_subscribe" in sub.reason
    assert not isinstance(fine, Refuse)
    assert not r.tables.srt and len(r.tables.prt) == 1  # nothing refused reached the tables
    assert len([m for m in caplog.messages if "refused" in m]) == 1  # logged once, counted always
    assert r.counters["refused.acl"] == 2


def test_an_identity_rule_replaces_its_role_and_an_unknown_role_may_do_nothing() -> None:
    r = router(("c1", "root", "client"), ("c2", "eve", "intern"))
    assert not isinstance(answer(r, Advertise("1", parse_filter("[class,eq,CTL]")), "c1"), Refuse)
    refused = answer(r, Subscribe("1", parse_filter("[class,eq,stock]")), "c2")
    assert isinstance(refused, Refuse) and "role 'intern' of eve has no rules" in refused.reason


def test_a_client_on_a_plain_link_is_not_checked() -> None:
    r = router(("c1", "", ""))
    assert not isinstance(answer(r, Subscribe("1", parse_filter("[class,eq,CTL]")), "c1"), Refuse)


def test_a_neighbour_forwards_only_what_was_advertised_from_its_side() -> None:
    """A peer that got in as a broker cannot inject publications no one on its side advertised."""
    r = Router("B1")
    r.handle(LinkUp(broker=True, epoch="e2"), "B2", 0.0)
    r.handle(LinkUp(broker=False), "sub", 0.0)
    r.handle(Subscribe("s", parse_filter("[class,eq,CTL]")), "sub", 0.0)
    forged = r.handle(Carry(1, Publish("B2/x/1", parse_publication("[class,CTL],[agent,a1]"))), "B2", 0.0)
    assert [type(m).__name__ for _, m in forged] == ["Took"]  # taken, and dropped
    assert r.counters["dropped.nonconforming"] == 1
    r.handle(Carry(2, Advertise("B2/p/1", parse_filter("[class,eq,CTL],[agent,isPresent,'']"))), "B2", 0.0)
    routed = r.handle(Carry(3, Publish("B2/p/2", parse_publication("[class,CTL],[agent,a1]"))), "B2", 0.0)
    assert "sub" in [hop for hop, _ in routed]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[roles.agent\n", "ACL: "),
        ("[groups.x]\n", "unknown section 'groups'"),
        ("[roles.agent]\nread = []\n", "roles.agent: unknown key 'read'"),
        ("[roles.agent]\npublish = '[class,eq,x]'\n", "roles.agent.publish must be a list"),
        ("[roles.agent]\npublish = ['[class,eq,x],[n,>,oops']\n", "roles.agent.publish[0]: "),
        ("[roles.agent]\ndeny_publish = ['*']\n", "deny_publish: '*' is for what is allowed"),
    ],
)
def test_a_bad_acl_is_refused_naming_where(text: str, error: str) -> None:
    with pytest.raises(PolicyError, match=error.replace("[", r"\[").replace("*", r"\*")):
        Policy.parse(text, "ACL")
