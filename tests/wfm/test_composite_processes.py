"""Composite subscriptions over real ``wfm broker`` processes (the five-broker star), subscribed
with ``cs`` lines of ``wfm client``: the cases of the simulator suite, each with its own classes so
that they can share one overlay, and the workflow shape with two generations."""

from __future__ import annotations

import json
import re
import subprocess
import time

from broker.client import BlockingClient
from broker.language import parse_publication
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, quiet
from tests.routing.test_composite_sim import CASES
from tests.routing.test_detection import WORKFLOW

STAR = {"B1": [], "B2": ["B1"], "B3": ["B1"], "B4": ["B1"], "B5": ["B1"]}
SOURCES = {"a": "B2", "b": "B3", "c": "B4", "d": "B5", "j": "B2", "t": "B3"}


def renamed(text: str, case: int) -> str:
    """Case ``case``'s own classes: a -> a3 and so on."""
    return re.sub(r"\[class,(eq,)?([a-d])\]", lambda m: f"[class,{m.group(1) or ''}{m.group(2)}{case}]", text)


def client_process(uri: BrokerURI, name: str) -> subprocess.Popen[str]:
    """A ``wfm client`` reading command lines on stdin, its deliveries as JSON lines on stdout."""
    return subprocess.Popen(
        [WFM, "client", "--broker", str(uri), "--id", name, "-o", "json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_composites_fire_over_real_brokers() -> None:
    workflow = WORKFLOW.replace("JOBSTATUS", "j").replace("Trigger", "t")
    with brokers(STAR, heartbeat=1.0) as uris:
        subscriber = client_process(uris["B5"], "agent")
        assert subscriber.stdin is not None
        for i, (composite, _, _) in enumerate(CASES):
            subscriber.stdin.write(f"cs {renamed(composite, i)}\n")
        subscriber.stdin.write(f"cs {workflow}\n")
        subscriber.stdin.flush()
        assert subscriber.stderr is not None
        ids = [subscriber.stderr.readline().split()[-1] for _ in range(len(CASES) + 1)]  # "sub <id>"
        publishers = {cls: BlockingClient(uris[broker], f"pub-{cls}") for cls, broker in SOURCES.items()}
        try:
            for cls in "abcd":
                for i in range(len(CASES)):
                    publishers[cls].advertise(f"[class,eq,{cls}{i}],[x,isPresent,''],[n,isPresent,0]")
            publishers["j"].advertise(
                "[class,eq,j],[applname,eq,PAYROLL],[jobname,isPresent,''],[GID,isPresent,''],[status,isPresent,'']"
            )
            publishers["t"].advertise("[class,eq,t],[applname,eq,PAYROLL],[GID,isPresent,'']")
            time.sleep(0.5)
            quiet(uris)
            expected: list[list[list[str]]] = []
            for i, (_, publications, firings) in enumerate(CASES):
                for text in publications:
                    publication = parse_publication(renamed(text, i))
                    publishers[publication.cls[0]].publish(publication)
                    time.sleep(0.05)  # the order of one case's publications matters at its detector
                expected.append([[str(parse_publication(renamed(p, i))) for p in f] for f in firings])
            for text in [
                "[class,j],[applname,PAYROLL],[jobname,JobA],[GID,g1],[status,SUCCESS]",
                "[class,t],[applname,PAYROLL],[GID,g2]",
                "[class,j],[applname,PAYROLL],[jobname,JobA],[GID,g2],[status,FAILURE]",
                "[class,t],[applname,PAYROLL],[GID,g1]",
            ]:
                publishers[text[7]].publish(text)
                time.sleep(0.05)
            job_a, trigger = (
                "[class,j],[applname,PAYROLL],[jobname,JobA],[GID,g1],[status,SUCCESS]",
                "[class,t],[applname,PAYROLL],[GID,g1]",
            )
            expected.append([[str(parse_publication(job_a)), str(parse_publication(trigger))]])
        finally:
            for publisher in publishers.values():
                publisher.close()
        out, err = subscriber.communicate("sleep 1\n", timeout=30)
    assert err == ""
    fired: dict[str, list[list[str]]] = {sub_id: [] for sub_id in ids}
    for line in out.splitlines():
        record = json.loads(line)
        fired[record["subscription"]].append([p["publication"] for p in record["publications"]])

    def canonical(firings: list[list[str]]) -> list[list[str]]:  # the order inside is the simulator's test
        return sorted(sorted(firing) for firing in firings)

    assert [canonical(fired[sub_id]) for sub_id in ids] == [canonical(firings) for firings in expected]
    assert subscriber.returncode == 0, err


def test_padres_complex_cs_over_real_brokers_with_a_policy_named_on_the_cs_line() -> None:
    """PADRES's TestComplexCS: the publisher's broker detects (its sources are there: it
    advertised first, and a detection stays where it was placed), the subscriber asks from the
    other. Named ``padres``, the second publication fires again with the stored first; the plain
    ``cs`` (chronicle) consumed it and fires once."""
    stock = "{{[class,eq,stock],[number,>,120]}&{[class,eq,stock],[price,<,80]}}"
    first, second = "[class,stock],[number,130],[price,60]", "[class,stock],[price,70]"
    with brokers({"B1": [], "B2": ["B1"]}) as uris:
        with BlockingClient(uris["B1"], "exchange") as publisher:
            publisher.advertise("[class,eq,stock],[number,isPresent,0],[price,isPresent,0]")
            publisher.advertise("[class,eq,stock],[price,isPresent,0]")
            quiet(uris)
            subscriber = client_process(uris["B2"], "monitor")
            assert subscriber.stdin is not None and subscriber.stderr is not None
            subscriber.stdin.write(f"cs padres {stock}\ncs {stock}\n")
            subscriber.stdin.flush()
            padres, chronicle = (subscriber.stderr.readline().split()[-1] for _ in range(2))
            quiet(uris)
            status = BlockingClient(uris["B1"], "look")
            assert status.status()["composite_detected"] == 2  # both at B1, each as asked
            status.close()
            for text in (first, second):
                publisher.publish(text)
                time.sleep(0.1)
        out, err = subscriber.communicate("sleep 1\n", timeout=30)
    assert err == "" and subscriber.returncode == 0
    fired: dict[str, list[list[str]]] = {padres: [], chronicle: []}
    for line in out.splitlines():
        record = json.loads(line)
        fired[record["subscription"]].append([p["publication"] for p in record["publications"]])
    assert fired == {padres: [[first, first], [first, second]], chronicle: [[first, first]]}
