"""Reading through the historian (real processes, mutual TLS): a client may read only what it
could subscribe to, answers reach only the asker, and an asker takes no forged answer."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agents.trust import load_ca
from broker.client import BlockingClient, RefusedError
from broker.language import Publication
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers
from wfm.history.asker import Answers, historian_signature
from wfm.history.protocol import (
    attributed,
    final_publication,
    parse_answer,
    result_digest,
    result_publication,
)
from wfm.signing import tls_deployer

pytestmark = pytest.mark.chaos

ENVELOPE = Publication(
    "AGENT_CTL",
    {
        "agentname": "a1",
        "applname": "W",
        "version": "v",
        "command": "JOBINFO",
        "jobname": "J",
        "content": "s3cr3t",
    },
)
STATUS = Publication(
    "JOBSTATUS", {"applname": "W", "jobname": "J", "GID": "g1", "status": "SUCCESS", "agentname": "agentA"}
)
FORGED = Publication("JOBSTATUS", {**STATUS.fields, "status": "FAILURE"})  # nobody signed it


def advertisement(publication: Publication) -> str:
    """One that every attribute of ``publication`` fits, of its type."""
    present = [
        f"[{name},isPresent,{0 if isinstance(value, int) else repr('')}]"
        for name, value in publication.items()
    ]
    return ",".join([f"[class,eq,{publication.cls}]", *present[1:]])


@contextmanager
def historian(tmp: Path, certs: Path) -> Iterator[BrokerURI]:
    """B1 with a historian (identity historian) that has landed an envelope and agentA's signed
    status, and been offered a forged one."""
    with brokers({"B1": []}, certs=certs) as uris:
        uri = uris["B1"]
        with (tmp / "historian.log").open("w") as log:
            tls = ["--tls", str(certs), "--identity", "historian"]
            child = subprocess.Popen(
                [WFM, "historian", "--broker", str(uri), "--store", str(tmp / "store"), *tls], stderr=log
            )
        try:
            with BlockingClient(uri, "feeder", tls=Identity(certs, "deployer")) as deployer:
                deployer.advertise(advertisement(ENVELOPE))
                deployer.advertise(advertisement(tls_deployer(certs, "agentA").sign_publication(STATUS)))
                deadline = time.monotonic() + 20
                while "SUCCESS" not in history(uri, certs, "monitor", "[class,eq,JOBSTATUS]").stdout:
                    assert time.monotonic() < deadline, (tmp / "historian.log").read_text()
                    deployer.publish(ENVELOPE)
                    deployer.publish(FORGED)
                    deployer.publish(tls_deployer(certs, "agentA").sign_publication(STATUS))
                    time.sleep(0.5)
            yield uri
        finally:
            child.terminate()
            child.wait(timeout=15)


def history(uri: BrokerURI, certs: Path, identity: str, wanted: str) -> subprocess.CompletedProcess[str]:
    command = [WFM, "history", wanted, "--broker", str(uri), "--tls", str(certs), "--identity", identity]
    return subprocess.run([*command, "--timeout", "10"], capture_output=True, text=True, timeout=60)


def test_a_client_reads_through_the_historian_only_what_it_may_subscribe_to(
    tmp_path: Path, certs: Path
) -> None:
    with historian(tmp_path, certs) as uri:
        refused = history(uri, certs, "alice", "[class,eq,AGENT_CTL]")
        assert refused.returncode == 1 and "s3cr3t" not in refused.stdout
        assert "access denied: client alice may not read [class,eq,AGENT_CTL]" in refused.stderr
        statuses = history(uri, certs, "alice", "[class,eq,JOBSTATUS]").stdout
        assert "SUCCESS" in statuses and "FAILURE" not in statuses  # the forgery was not kept
        assert "s3cr3t" in history(uri, certs, "monitor", "[class,eq,AGENT_CTL]").stdout
        with BlockingClient(uri, "snoop", tls=Identity(certs, "alice")) as alice:
            with pytest.raises(RefusedError, match="deny_subscribe"):  # someone else's answers
                alice.subscribe("[class,eq,HISTORY_RESULT],[query,isPresent,'']")
            with pytest.raises(RefusedError, match="deny_publish"):  # questions in another's name
                alice.advertise("[class,eq,HISTORY_QUERY],[query,isPresent,''],[asker,isPresent,'']")
    logged = (tmp_path / "historian.log").read_text()
    assert "refused history query" in logged and "not kept: a JOBSTATUS from unknown signer" in logged


def test_an_asker_takes_no_answer_but_a_historians_over_exactly_what_it_received(certs: Path) -> None:
    stored = Publication("JOBSTATUS", {"applname": "W", "status": "SUCCESS"})
    results = [
        result_publication("q", 1, "B1/h/1", 1.0, stored),
        result_publication("q", 2, "B1/h/2", 2.0, stored),
    ]
    digest = result_digest((n, f"B1/h/{n}", float(n), stored) for n in (1, 2))
    verify = historian_signature(load_ca(certs))

    def answer(final: Publication, shown: list[Publication]) -> Answers:
        answers = Answers(0.0, 10.0, verify=verify)
        for publication in [*shown, final]:
            answers.add("h", parse_answer(publication), 1.0, publication)
        return answers

    def final(signer: str, count: int = 2, digest: str = digest) -> Publication:
        marker = attributed(final_publication("q", count, digest=digest), "h", "monitor")
        return tls_deployer(certs, signer).sign_publication(marker)

    assert len(answer(final("historian"), results).results) == 2
    forged = [
        (final("monitor"), results, "has role monitor, not historian"),  # a broker cannot sign as one
        (attributed(final_publication("q", 2, digest=digest), "h", ""), results, "unsigned"),
        (final("historian"), results[:1], "its 1 results are not the 2 it signed for"),  # one left out
        (final("historian"), [results[0], result_publication("q", 2, "B1/h/2", 2.0, STATUS)], "changed"),
    ]
    for marker, shown, why in forged:
        refused = answer(marker, shown)
        assert refused.results == {} and why in (refused.failure() or ""), refused.errors
