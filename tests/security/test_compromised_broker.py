"""A compromised broker over mutual TLS (real processes): what it can no longer do.

B1 and B2 are honest; B4 holds a valid broker certificate but is the attacker's: it runs with an
access list that lets its client ``alice`` publish anything, so Triggers and job statuses that no
honest edge broker would take enter the overlay as if from B4's side. Agents must still start no
generation that no operator signed, and run no job before the job it follows really ended.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import pytest

from broker.client import BlockingClient
from broker.client import brokers as brokers_of
from broker.language import Publication
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, status, wait_for, watcher
from tests.transport.harness import free_port
from wfm.signing import tls_deployer
from wfm.triggers import TriggerPublisher
from workflow_messages import job_status, trigger, trigger_advertisement
from workflow_messages.jobstatus import status_advertisement

pytestmark = pytest.mark.chaos

LINE = {"B1": [], "B2": ["B1"]}
HOMES = {"agentA": "B1", "agentB": "B2"}
WORKFLOW = """<workflow name="GUARDED">
  <job name="JobA" agent="agentA"><command>sleep 3; echo "JobA $WFM_GID" >> {log}</command></job>
  <job name="JobB" agent="agentB"><after job="JobA"/><command>echo "JobB $WFM_GID" >> {log}</command></job>
</workflow>
"""
EVIL_ACL = '[roles.client]\npublish = ["*"]\nsubscribe = ["*"]\n'  # the compromised broker's own rules


@contextmanager
def overlay(tmp: Path, certs: Path) -> Iterator[dict[str, BrokerURI]]:
    """B1-B2 with agentA and agentB over TLS, GUARDED deployed by the deployer, and B4 (the
    attacker's broker) linked to B1."""
    with brokers(LINE, certs=certs) as uris:
        (tmp / "evil.toml").write_text(EVIL_ACL)
        uris["B4"] = BrokerURI("127.0.0.1", free_port(), "B4")
        tls = ["--tls", str(certs)]
        children = [
            _start(
                tmp / "B4.log",
                [
                    WFM,
                    "broker",
                    "--uri",
                    str(uris["B4"]),
                    "--memory",
                    "--neighbor",
                    str(uris["B1"]),
                    *_evil(tmp, certs),
                ],
            )
        ]
        for agent, home in HOMES.items():
            argv = [WFM, "agent", "--name", agent, "--broker", str(uris[home]), *tls, "--identity", agent]
            children.append(_start(tmp / f"{agent}.log", [*argv, "--state-dir", str(tmp / agent)]))
        try:
            wait_for(lambda: "B4" in status(uris["B1"], watcher(certs)).get("neighbors", ()), "B4 linked")
            (tmp / "guarded.xml").write_text(WORKFLOW.format(log=tmp / "jobs.log"))
            deploy = [WFM, "deploy", str(tmp / "guarded.xml"), "--broker", str(uris["B2"]), *tls]
            done = subprocess.run(
                [*deploy, "--identity", "deployer", "--timeout", "20"], capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
            yield uris
        finally:
            for child in children:
                child.terminate()
                child.wait(timeout=10)


def _start(log: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:  # the child keeps its own descriptor
        return subprocess.Popen(argv, stderr=stderr)


def _evil(tmp: Path, certs: Path) -> list[str]:
    """B4's options: TLS as the broker B4, and rules that let its clients publish anything."""
    return ["--tls", str(certs), "--identity", "B4", "--acl", str(tmp / "evil.toml")]


def forged_status(job: str, gid: str, agent: str) -> Publication:
    return job_status("GUARDED", job, gid, "SUCCESS", "", version="x", agent=agent)


def test_a_compromised_broker_can_neither_start_a_generation_nor_fake_a_jobs_end(
    tmp_path: Path, certs: Path
) -> None:
    with overlay(tmp_path, certs) as uris:
        monitor = BlockingClient(uris["B2"], "watch", tls=Identity(certs, "monitor"))
        monitor.subscribe("[class,eq,JOBSTATUS],[applname,eq,GUARDED]")
        alice = BlockingClient(uris["B4"], "attacker", tls=Identity(certs, "alice"))
        alice.advertise(trigger_advertisement())
        alice.advertise(status_advertisement("GUARDED", "JobA"))
        time.sleep(1)  # the advertisements reach the agents' brokers
        today = date.today()
        # a Trigger nobody signed, one signed by a client, and one by a stolen agent key
        alice.publish(trigger("GUARDED", "unsigned", today))
        alice.publish(tls_deployer(certs, "alice").sign_publication(trigger("GUARDED", "by-client", today)))
        alice.publish(tls_deployer(certs, "agentB").sign_publication(trigger("GUARDED", "by-agent", today)))
        with TriggerPublisher(brokers_of(uris["B1"]).secured(Identity(certs, "operator"))) as operator:
            operator.publish("GUARDED", "g1", today)
        time.sleep(1)  # JobA of g1 runs for 3 s: its end, forged now, would start JobB
        seen: list[Publication] = []
        while not any(p["jobname"] == "APPL_START" for p in seen):
            delivery = monitor.receive(10)
            assert delivery is not None, "g1 did not start"
            seen.append(delivery.publication)
        version = next(str(p["version"]) for p in seen if p["jobname"] == "APPL_START")
        end_of_a = {**forged_status("JobA", "g1", "agentA").fields, "version": version}
        alice.publish(Publication("JOBSTATUS", end_of_a))  # unsigned
        by_b = {**end_of_a, "agentname": "agentB"}  # signed with a stolen key of another agent
        alice.publish(tls_deployer(certs, "agentB").sign_publication(Publication("JOBSTATUS", by_b)))
        deadline = time.monotonic() + 30
        while not any(p["jobname"] == "APPL_END" for p in seen):
            assert time.monotonic() < deadline, f"g1 did not end: {seen}"
            delivery = monitor.receive(1)
            if delivery is not None:
                seen.append(delivery.publication)
        placed = {"JobA": "agentA", "JobB": "agentB", "APPL_START": "agentA", "APPL_END": "agentA"}
        statuses = {  # the real ones: signed by the agent each job is deployed on
            (str(p["GID"]), str(p["jobname"])): p
            for p in seen
            if str(p.get("signer", "")).startswith("cert:") and p["agentname"] == placed[str(p["jobname"])]
        }
        job_a, job_b = statuses["g1", "JobA"], statuses["g1", "JobB"]
        assert float(job_b["started"]) >= float(job_a["started"]) + float(job_a["duration"]) - 0.01
        assert (tmp_path / "jobs.log").read_text().splitlines() == ["JobA g1", "JobB g1"]
        assert {gid for gid, _ in statuses} == {"g1"}  # no generation the attacker triggered started
        refusals = (tmp_path / "agentA.log").read_text() + (tmp_path / "agentB.log").read_text()
        assert "Trigger from unknown signer: unsigned Trigger" in refusals
        assert "has role client, not deployer or operator or scheduler" in refusals
        assert "has role agent, not deployer or operator or scheduler" in refusals
        assert "signed a status of JobA, which is deployed on agentA" in refusals
        monitor.close()
        alice.close()
