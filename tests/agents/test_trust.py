"""Whom an agent takes envelopes from (:mod:`agents.trust`), without sockets: certificates made here
with ``cryptography``, envelopes signed here, the agent's time passed in."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from agents.events import Delivered, Emit, Incoming
from agents.state import Agent
from agents.trust import Refusal, Trust, load_ca
from broker.language import Publication
from broker.transport.revocation import Revocations
from tests.agents.test_state import PLAN, key, runs
from wfm.certs import init, issue, revoke
from wfm.certs import subject_name as name
from wfm.signing import Deployer, tls_deployer
from workflow_messages import job_status, trigger
from workflow_messages.signature import Signer, check_signature, signed_bytes

NOW = dt.datetime(2026, 11, 23, 12, tzinfo=dt.UTC)
ENVELOPE = PLAN.publications()[0]


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def certificate(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    days: int = 365,
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=days))
        .sign(issuer_key, hashes.SHA256())
    )


class CA:
    def __init__(self) -> None:
        self.key, self.name = new_key(), name("wfm CA", "ca")
        self.certificate = certificate(self.name, self.key, self.name, self.key)

    def issue(self, cn: str, role: str, days: int = 365) -> Deployer:
        key = new_key()
        cert = certificate(name(cn, role), key, self.name, self.key, days)
        return Deployer(Signer.with_certificate(key, cert), cn)


def local() -> Deployer:
    return Deployer(Signer.with_key(new_key()), "local")


def admit(trust: Trust, envelope: Publication, at: dt.datetime = NOW) -> str:
    return trust.admit(envelope, at.timestamp())


def reason(trust: Trust, envelope: Publication, at: dt.datetime = NOW) -> str:
    with pytest.raises(Refusal) as refusal:
        admit(trust, envelope, at)
    return refusal.value.reason


def test_the_signed_bytes_are_canonical_msgpack_of_every_signed_field() -> None:
    fields = {
        name: name for name in ("agentname", "applname", "version", "command", "jobname", "content", "signer")
    }
    encoded = signed_bytes({**fields, "sequence": 7})
    assert encoded == signed_bytes(dict(reversed(list({**fields, "sequence": 7}.items()))))
    assert encoded.startswith(b"\x99\xafwfm-agent-ctl-1\xa9agentname")  # array of 9, the format tag first


@pytest.mark.parametrize(
    ("field", "value"),
    [("content", "x"), ("version", "v2"), ("agentname", "agentB"), ("applname", "OTHER"), ("sequence", 8)],
)
def test_changing_any_signed_field_breaks_the_signature(field: str, value: object) -> None:
    signed = local().signer.sign(ENVELOPE, 7)
    check_signature(signed)
    changed = Publication(signed.cls, {**signed.fields, field: value})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="bad signature"):
        check_signature(changed)


def test_an_extra_field_or_no_signature_is_refused() -> None:
    signed = local().signer.sign(ENVELOPE, 7)
    with pytest.raises(ValueError, match="'cwd' is not covered"):
        check_signature(Publication(signed.cls, {**signed.fields, "cwd": "/tmp"}))
    assert reason(Trust(), ENVELOPE) == "unsigned envelope"


def test_trust_on_first_use_pins_the_first_key_and_keeps_it_in_the_snapshot() -> None:
    deployer, mallory = local(), local()
    agent = Agent(str(ENVELOPE["agentname"]))
    [ack] = [e.publication for e in agent.handle(Incoming(deployer.sign(ENVELOPE)), 0) if isinstance(e, Emit)]
    assert ack["result"] == "OK"
    restarted = Agent(agent.name)
    restarted.restore(json.loads(json.dumps(agent.snapshot())))
    [refused] = [
        e.publication for e in restarted.handle(Incoming(mallory.sign(ENVELOPE)), 0) if isinstance(e, Emit)
    ]
    assert refused["result"] == "REFUSED"
    assert str(refused["detail"]).endswith("is not the deployer key pinned on first use")
    assert restarted.refused == {"signer": 1}
    assert admit(restarted.trust, deployer.sign(ENVELOPE)).startswith("sha256:")


def test_trust_takes_only_the_given_key() -> None:
    deployer, other = local(), local()
    trust = Trust(trusted=deployer.signer.key.public_key())
    assert "is not the key given with --trust" in reason(trust, other.sign(ENVELOPE))
    assert trust.pinned is None
    admit(trust, deployer.sign(ENVELOPE))


def test_with_a_ca_only_its_valid_deployer_certificates_sign() -> None:
    ca, other = CA(), CA()
    trust = Trust(ca=ca.certificate)
    assert admit(trust, ca.issue("alice", "deployer").sign(ENVELOPE)) == "deployer alice"
    assert (
        reason(trust, ca.issue("mallory", "client").sign(ENVELOPE)) == "mallory has role client, not deployer"
    )
    assert reason(trust, other.issue("eve", "deployer").sign(ENVELOPE)) == (
        "eve's certificate was not issued by this CA"
    )
    expired = ca.issue("old", "deployer", days=30)
    assert "is not valid now" in reason(trust, expired.sign(ENVELOPE), NOW + dt.timedelta(days=31))
    assert "has no certificate" in reason(trust, local().sign(ENVELOPE))
    assert "start the agent with --tls" in reason(Trust(), ca.issue("alice", "deployer").sign(ENVELOPE))


def test_replays_are_refused_per_signer_and_workflow() -> None:
    trust, deployer = Trust(), local()
    first, second = deployer.sign(ENVELOPE), deployer.sign(ENVELOPE)
    admit(trust, second)
    assert reason(trust, second).startswith(f"replay: sequence {second['sequence']} of PAYROLL is not above")
    assert reason(trust, first).startswith("replay")  # older, never seen: still below the last
    other = Publication(ENVELOPE.cls, {**ENVELOPE.fields, "applname": "OTHER"})
    admit(trust, deployer.sign(other))  # another workflow has its own line
    admit(trust, deployer.sign(ENVELOPE))


def test_a_version_signed_before_a_newer_one_was_deployed_is_a_downgrade() -> None:
    trust, deployer = Trust(), local()
    v2 = Publication(ENVELOPE.cls, {**ENVELOPE.fields, "version": "v2"})
    old = deployer.sign(ENVELOPE)  # signed, never delivered
    admit(trust, deployer.sign(v2))
    assert (
        reason(trust, old)
        == f"downgrade: PAYROLL version {ENVELOPE['version']} was signed before version v2 was deployed"
    )
    admit(trust, deployer.sign(ENVELOPE))  # the deployer going back on purpose: signed after
    undeploy = Publication(ENVELOPE.cls, {**ENVELOPE.fields, "command": "UNDEPLOY"})
    before = deployer.sign(v2)
    admit(trust, deployer.sign(undeploy))
    assert reason(trust, before).endswith("was signed before the workflow was undeployed")


def test_refusals_are_logged_once_per_kind_and_signer_and_all_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent, mallory = Agent(str(ENVELOPE["agentname"])), local()
    agent.handle(Incoming(local().sign(ENVELOPE)), 0)
    for second in range(10):
        agent.handle(Incoming(mallory.sign(ENVELOPE)), second)
    agent.handle(Incoming(mallory.sign(ENVELOPE)), 61)
    lines = [r.getMessage() for r in caplog.records if "refused AGENT_CTL" in r.getMessage()]
    assert len(lines) == 2 and agent.refused == {"signer": 11}
    assert lines[1].endswith("(11 signer refusals, 9 not logged since the last)")
    assert "BEGIN" not in caplog.text and "PRIVATE" not in caplog.text


CANCEL = Publication(
    "AGENT_CTL",
    {**{k: v for k, v in ENVELOPE.items() if k != "class"}, "command": "CANCEL", "version": "*"},
)


def trigger_of(signer: Deployer) -> Publication:
    return signer.sign_publication(trigger("PAYROLL", "g1", NOW.date()))


def status_of(signer: Deployer, job: str = "JobA", agent: str = "agentA") -> Publication:
    return signer.sign_publication(job_status("PAYROLL", job, "g1", "SUCCESS", "", version="v", agent=agent))


def refused(check: Callable[[], object]) -> Refusal:
    with pytest.raises(Refusal) as refusal:
        check()
    return refusal.value


def test_each_role_signs_what_it_may_and_nothing_else() -> None:
    """Deployers deploy, operate and trigger; operators operate and trigger; schedulers trigger;
    agents sign their own jobs' statuses only; the refusal names the signer by its role and name."""
    ca = CA()
    trust = Trust(ca=ca.certificate)
    at = time.time()  # Triggers are signed by the clock: no further from it than the skew allowed
    operator, scheduler, agent_a = (
        ca.issue("ops", "operator"),
        ca.issue("cron", "scheduler"),
        ca.issue("agentA", "agent"),
    )
    assert reason(trust, operator.sign(ENVELOPE)) == "ops has role operator, not deployer"
    assert admit(trust, operator.sign(CANCEL)) == "operator ops"
    assert reason(trust, scheduler.sign(CANCEL)) == "cron has role scheduler, not deployer or operator"
    for signer in (ca.issue("alice", "deployer"), operator, scheduler):
        assert trust.admit_trigger(trigger_of(signer), at, 3600).endswith(signer.name)
    monitor = refused(lambda: trust.admit_trigger(trigger_of(ca.issue("mon", "monitor")), at, 3600))
    assert (monitor.who, monitor.reason) == (
        "monitor mon",
        "mon has role monitor, not deployer or operator or scheduler",
    )
    assert (
        "unsigned Trigger"
        in refused(lambda: trust.admit_trigger(trigger("PAYROLL", "g1", NOW.date()), at, 3600)).reason
    )
    assert trust.admit_status(status_of(agent_a), at, "agentA") == "agent agentA"
    assert (
        trust.admit_status(status_of(agent_a), at, None) == "agent agentA"
    )  # a deployment that does not say
    assert (
        "which is deployed on agentB"
        in refused(lambda: trust.admit_status(status_of(agent_a), at, "agentB")).reason
    )
    agent_b = ca.issue("agentB", "agent")
    assert (
        "signed a status of agent 'agentA'"
        in refused(lambda: trust.admit_status(status_of(agent_b), at, "agentA")).reason
    )
    assert "not deployer" not in refused(lambda: trust.admit_status(status_of(operator), at, "agentA")).reason
    tampered = Publication("JOBSTATUS", {**status_of(agent_a).fields, "status": "FAILURE"})
    assert refused(lambda: trust.admit_status(tampered, at, "agentA")).kind == "signature"


def test_a_trigger_signed_longer_ago_than_the_agent_remembers_generations_is_refused() -> None:
    ca = CA()
    trust = Trust(ca=ca.certificate)
    old = trigger_of(ca.issue("ops", "operator"))  # signed now, by the clock
    later = time.time() + 2 * 3600
    assert trust.admit_trigger(old, later, 3 * 3600) == "operator ops"
    stale = refused(lambda: trust.admit_trigger(old, later, 3600))
    assert stale.kind == "stale" and "signed 2.0 h ago, more than 1 h" in stale.reason
    # nor one dated ahead of the agent's clock by more than the skew allowed: it would never go stale
    assert trust.admit_trigger(old, time.time() - 60, 3600) == "operator ops"
    ahead = refused(lambda: trust.admit_trigger(old, time.time() - 3600, 3 * 3600))
    assert ahead.kind == "stale" and "ahead of this agent's clock" in ahead.reason


def test_without_a_ca_triggers_need_the_deployer_key_and_statuses_are_not_checked() -> None:
    deployer, other = local(), local()
    trust = Trust()
    at = time.time()  # Triggers are signed by the clock: no further from it than the skew allowed
    assert (
        "no deployer key is pinned yet"
        in refused(lambda: trust.admit_trigger(trigger_of(deployer), at, 60)).reason
    )
    assert trust.pinned is None  # a Trigger never pins a key
    admit(trust, deployer.sign(ENVELOPE))
    assert trust.admit_trigger(trigger_of(deployer), at, 60).startswith("sha256:")
    assert (
        "is not the deployer key pinned"
        in refused(lambda: trust.admit_trigger(trigger_of(other), at, 60)).reason
    )
    unsigned = job_status("PAYROLL", "JobA", "g1", "SUCCESS", "", version="v", agent="agentA")
    assert trust.admit_status(unsigned, at, "agentA") == ""


def test_a_revoked_identity_signs_nothing_any_more(tmp_path: Path) -> None:
    """``wfm certs revoke`` reaches the agent's checks through ``DIR/ca.crl`` without a restart."""
    init(tmp_path)
    for who, role in (("alice", "deployer"), ("ops", "operator"), ("agentA", "agent")):
        issue(tmp_path, who, role)
    trust = Trust(ca=load_ca(tmp_path), revocations=Revocations(tmp_path, recheck=0))
    alice, ops, agent_a = (tls_deployer(tmp_path, who) for who in ("alice", "ops", "agentA"))
    at = time.time()
    admit(trust, alice.sign(ENVELOPE), dt.datetime.fromtimestamp(at, dt.UTC))
    for who in ("alice", "ops", "agentA"):
        revoke(tmp_path, who)
    assert "alice's certificate is revoked" in reason(
        trust, alice.sign(ENVELOPE), dt.datetime.fromtimestamp(at, dt.UTC)
    )
    assert refused(lambda: trust.admit_trigger(trigger_of(ops), at, 60)).kind == "revoked"
    assert refused(lambda: trust.admit_status(status_of(agent_a), at, "agentA")).kind == "revoked"


def test_an_agent_with_a_ca_acts_only_on_what_the_right_agents_signed() -> None:
    """agentB runs JobB after agentA's JobA: a JobA status that agentB itself (or a stolen key of
    it) signed fires nothing, agentA's does; an APPL_END not signed by the coordinator (agentA)
    ends nothing."""
    ca = CA()
    deployer, agent_a, agent_b = (
        ca.issue("ops", "deployer"),
        ca.issue("agentA", "agent"),
        ca.issue("agentB", "agent"),
    )
    agent = Agent("agentB", trust=Trust(ca=ca.certificate))
    at = time.time()
    for envelope in PLAN.publications():
        if envelope["agentname"] == "agentB":
            agent.handle(Incoming(deployer.sign(envelope)), at)
    go = deployer.sign_publication(trigger("PAYROLL", "g1", NOW.date()))  # a Monday: JobB runs

    def ended(signer: Deployer, job: str, who: str) -> Publication:
        status = job_status("PAYROLL", job, "g1", "SUCCESS", "", version=PLAN.version, agent=who)
        return signer.sign_publication(status)

    assert runs(agent.handle(Delivered(key(agent, "JobB"), (go, ended(agent_b, "JobA", "agentB"))), at)) == []
    assert agent.refused["firing"] == 1
    [run] = runs(agent.handle(Delivered(key(agent, "JobB"), (go, ended(agent_a, "JobA", "agentA"))), at))
    assert run.job == "JobB"
    starts = next(k for k, (_, _, job) in agent.owners.items() if job == "APPL_START")
    agent.handle(Delivered(starts, (ended(agent_a, "APPL_START", "agentA"),)), at)
    agent.handle(Delivered(starts, (ended(agent_b, "APPL_END", "agentB"),)), at)  # not the coordinator
    assert agent.refused["status"] == 1 and ("PAYROLL", "g1") not in agent.ended
    agent.handle(Delivered(starts, (ended(agent_a, "APPL_END", "agentA"),)), at)
    assert ("PAYROLL", "g1") in agent.ended
