"""Signed deployments over real processes: the attacks of issue 15 on agents, each refused with its
reason while the legitimate deployer's workflow keeps running.

The overlay is the one of :mod:`tests.agents.test_processes` (B1 - B2 - B3, one agent on each,
without TLS: agents pin the first deployer key they see). The legitimate deployer is ``wfm deploy``
with the default key under the test's ``$XDG_STATE_HOME``; the attacker is a plain client at B3
publishing envelopes: its own (signed with its own key), captured ones, or changed ones.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

from broker.client import BlockingClient
from broker.language import Publication, parse_publication
from tests.agents.test_processes import MONDAY, WORKFLOWS, Overlay
from tests.processes import WFM, quiet
from workflow_messages import deployer_advertisement, envelope_digest

ENVELOPES = "[class,eq,AGENT_CTL],[agentname,isPresent,'']"
ACKS = "[class,eq,AGENT_ACK],[agentname,isPresent,''],[result,isPresent,'']"


class Attacker:
    """A client at B3 that publishes AGENT_CTL envelopes and reads every agent's answers."""

    def __init__(self, overlay: Overlay) -> None:
        self.client = BlockingClient(overlay.uris["B3"], "mallory")
        self.client.subscribe(ACKS)
        self.advertised: set[tuple[str, str]] = set()

    def send(self, envelopes: list[Publication]) -> list[Publication]:
        """Publish ``envelopes``; the acknowledgement of each, in any order (those of others'
        envelopes are left out)."""
        digests = {envelope_digest(envelope) for envelope in envelopes}
        for envelope in envelopes:
            workflow, version = str(envelope["applname"]), str(envelope["version"])
            if (workflow, version) not in self.advertised:
                self.client.advertise(deployer_advertisement(workflow, version))
                self.advertised.add((workflow, version))
        time.sleep(0.5)  # the advertisements reach every broker (docs/overlay.md)
        for envelope in envelopes:
            self.client.publish(envelope)
        acks: list[Publication] = []
        deadline = time.monotonic() + 20
        while len(acks) < len(envelopes):
            assert time.monotonic() < deadline, f"{len(acks)} of {len(envelopes)} envelopes answered"
            delivery = self.client.receive(0.5)
            if delivery is not None and delivery.publication["digest"] in digests:
                acks.append(delivery.publication)
        return acks


def dry_run(file: Path, *options: str) -> list[Publication]:
    """The envelopes ``wfm deploy --dry-run -o json`` prints, signed now."""
    done = subprocess.run(
        [WFM, "deploy", str(file), "--dry-run", "-o", "json", *options], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return [parse_publication(json.loads(line)["publication"]) for line in done.stdout.splitlines()]


def refused(acks: list[Publication], reason: str) -> bool:
    """Every acknowledgement says REFUSED, for a reason starting with ``reason``."""
    return all(ack["result"] == "REFUSED" and str(ack["detail"]).startswith(reason) for ack in acks)


def logged_refusals(overlay: Overlay, agent: str) -> list[tuple[str, str]]:
    """(kind, line) of every refusal ``agent`` logged."""
    lines = (overlay.tmp / f"{agent}.log").read_text().splitlines()
    return [
        (re.findall(r"\(\d+ (\w+) refusals", line)[0], line) for line in lines if "refused AGENT_CTL" in line
    ]


def runs_payroll(overlay: Overlay, gid: str) -> None:
    overlay.trigger("PAYROLL", [gid], MONDAY)
    overlay.wait_end("PAYROLL", [gid])
    assert overlay.states("PAYROLL", gid)["APPL_END"] == "SUCCESS"


def test_a_client_with_its_own_key_can_neither_deploy_nor_undeploy(overlay: Overlay, tmp_path: Path) -> None:
    overlay.deploy(WORKFLOWS / "payroll.xml")  # the agents pin the deployer's key
    evil = tmp_path / "evil.xml"
    pwned = tmp_path / "pwned"
    job = f'<job name="Own" agent="agentA"><command>touch {pwned}</command></job>'
    evil.write_text(f'<workflow name="EVIL">{job}</workflow>')
    mallory = Attacker(overlay)
    mallory_key = ("--key", str(tmp_path / "mallory.key"))
    acks = mallory.send(dry_run(evil, *mallory_key))
    assert refused(acks, "signer sha256:")
    assert all(str(ack["detail"]).endswith("is not the deployer key pinned on first use") for ack in acks)
    overlay.trigger("EVIL", ["g1"])

    undeploy = subprocess.run(
        [WFM, "undeploy", str(WORKFLOWS / "payroll.xml"), "--broker", str(overlay.uris["B3"]), *mallory_key],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert undeploy.returncode == 1 and "REFUSED UNDEPLOY *: signer sha256:" in undeploy.stdout, undeploy
    quiet(overlay.uris)
    runs_payroll(overlay, "mon")  # still deployed, still running
    assert not pwned.exists()
    [(kind, line)] = logged_refusals(overlay, "agentA")  # several refusals, one line (then one a minute)
    assert kind == "signer" and "is not the deployer key pinned on first use (1 signer refusals)" in line
    assert (overlay.tmp / "agentA.log").read_text().count("TRUST ON FIRST USE") == 1


def test_captured_envelopes_replayed_tampered_or_downgraded_are_refused(
    overlay: Overlay, tmp_path: Path
) -> None:
    spy = BlockingClient(overlay.uris["B3"], "spy")
    spy.subscribe(ENVELOPES)
    quiet(overlay.uris)
    overlay.deploy(WORKFLOWS / "payroll.xml")
    captured = []
    while (delivery := spy.receive(1.0)) is not None:
        captured.append(delivery.publication)
    spy.close()
    assert captured
    fresh = dry_run(WORKFLOWS / "payroll.xml")  # signed by the deployer now, never delivered
    mallory = Attacker(overlay)

    assert refused(mallory.send(captured), "replay: sequence")

    [envelope] = [e for e in fresh if e["command"] == "DEPLOY" and e["agentname"] == "agentA"]
    content = str(envelope["content"])
    assert "step.sh extract" in content
    tampered = Publication(
        envelope.cls, {**envelope.fields, "content": content.replace("extract", "extracT")}
    )
    assert refused(mallory.send([tampered]), "bad signature (signer sha256:")

    (tmp_path / "v2").mkdir()
    shutil.copytree(WORKFLOWS / "scripts", tmp_path / "v2" / "scripts")
    v2 = tmp_path / "v2" / "payroll.xml"
    v2.write_text((WORKFLOWS / "payroll.xml").read_text().replace("step.sh extract", "step.sh extract-v2"))
    overlay.deploy(v2)
    assert refused(mallory.send(fresh), "downgrade: PAYROLL version")  # signed before version 2 was

    quiet(overlay.uris)
    runs_payroll(overlay, "mon")
    assert "extract-v2" in (overlay.output / "PAYROLL" / "mon" / "JobA.txt").read_text()
    assert sorted(kind for kind, _ in logged_refusals(overlay, "agentA")) == [
        "downgrade",
        "replay",
        "signature",
    ]
