"""``--metrics HOST:PORT``: the option, what a broker and an agent expose (in this process), and
one real ``wfm broker`` scraped over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from agents.service import AgentService
from agents.state import Agent
from broker.client import Client
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.agents.test_runner import run as job
from tests.monitor.test_up import free_ports
from tests.processes import WFM, wait_for
from tests.transport.harness import free_port, run, until, uri
from wfm.cli import main
from wfm.cli.serving import stop_event
from wfm.metrics import Address
from wfm.metrics.exposition import Exposition, LoopCollector, registry
from wfm.metrics.families import CountRequests, Families, agent_metrics, broker_metrics, web_metrics
from wfm.up import Started, serve

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(families: Families) -> Samples:
    return samples(generate_latest(registry(LoopCollector(families))).decode())


def at(found: Samples, name: str, **labels: str) -> float:
    return found[name, frozenset(labels.items())]


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("9100", "'9100' is not HOST:PORT (for example 127.0.0.1:9100)"),
        (":9100", "':9100' is not HOST:PORT (for example 127.0.0.1:9100)"),
        ("localhost:http", "'localhost:http' is not HOST:PORT (for example 127.0.0.1:9100)"),
        ("127.0.0.1:0", "'127.0.0.1:0': port 0 is not in 1..65535"),
        ("127.0.0.1:70000", "'127.0.0.1:70000': port 70000 is not in 1..65535"),
        ("a/b:9100", "'a/b:9100': 'a/b' is not a host name or address"),
    ],
)
def test_a_bad_address_is_a_one_line_usage_error(
    given: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["broker", "--uri", "socket://127.0.0.1:1/B1"], ["agent", "--name", "a"]):
        assert main([*command, "--metrics", given]) == 2
        assert capsys.readouterr().err == f"wfm: error: Invalid value for '--metrics': {reason}\n"


@pytest.mark.parametrize(
    ("given", "address"),
    [
        ("127.0.0.1:9100", Address("127.0.0.1", 9100)),
        ("localhost:9100", Address("localhost", 9100)),
        ("0.0.0.0:1", Address("0.0.0.0", 1)),
        ("[::1]:9100", Address("::1", 9100)),
    ],
)
def test_addresses(given: str, address: Address) -> None:
    assert Address.parse(given) == address
    assert str(address) == given


def test_wfm_up_gives_each_process_a_port_of_its_own_up_to_the_last() -> None:
    assert Address("127.0.0.1", 9100).shifted(3) == Address("127.0.0.1", 9103)
    with pytest.raises(ValueError, match="no port 65536 for the process 2"):
        Address("127.0.0.1", 65535).shifted(1)


def test_a_broker_exposes_its_counters_its_tables_and_each_links_frames() -> None:
    async def scenario() -> None:
        b1 = RouterService(uri("B1"))
        b2 = RouterService(uri("B2"), [b1.uri])
        await b1.start()
        await b2.start()
        await until(lambda: "B2" in b1.links and "B1" in b2.links, what="B1 and B2 linked")
        subscriber, publisher = await Client.connect(b2.uri, "sub"), await Client.connect(b1.uri, "pub")
        await publisher.advertise("[class,eq,stock],[price,>,0]")
        stream = await subscriber.subscribe("[class,eq,stock]")
        await until(lambda: b1.status()["subscriptions"] == 1, what="the subscription at B1")
        await publisher.publish("[class,stock],[price,1]")
        await stream.next(timeout=5)

        found = scrape(broker_metrics(b1))  # on the loop, between two of its steps
        info = {"id": "B1", "uri": str(b1.uri), "routing": "filter", "covering": "off", "ordering": "FIFO"}
        assert at(found, "wfm_broker_info", **info) == 1
        assert at(found, "wfm_broker_events_total", event="in.Publish") == 1
        assert at(found, "wfm_broker_events_total", event="in.Advertise") == 1
        assert at(found, "wfm_broker_clients") == 1
        assert at(found, "wfm_broker_neighbors") == 1
        assert at(found, "wfm_broker_subscriptions") == 1
        assert at(found, "wfm_broker_advertisements") == 1
        link = b1.links["B2"]
        assert at(found, "wfm_broker_link_frames_sent_total", peer="B2") == link.sent_frames > 0
        assert at(found, "wfm_broker_link_frames_received_total", peer="B2") == link.received_frames > 0
        assert at(found, "wfm_broker_held") == b1.status()["held"]
        assert not [key for key in found if dict(key[1]).get("peer") == "pub"]  # broker links only

        there = scrape(broker_metrics(b2))
        assert at(there, "wfm_broker_events_total", event="in.Subscribe") == 1
        assert at(there, "wfm_broker_link_frames_sent_total", peer="B1") == b2.links["B1"].sent_frames

        # served from prometheus_client's thread: the collector reads on the loop and waits
        exposition = Exposition(Address("127.0.0.1", free_port()), LoopCollector(broker_metrics(b1)))
        exposition.start()
        exposition.attach(asyncio.get_running_loop())
        try:
            text = await asyncio.to_thread(_get, exposition.address.url)
        finally:
            exposition.close()
        assert at(samples(text), "wfm_broker_events_total", event="in.Publish") == 1
        assert "process_cpu_seconds_total" in text

        await subscriber.close()
        await publisher.close()
        await b2.stop()
        await b1.stop()

    run(scenario())


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        return str(answer.read().decode())


def test_an_agent_exposes_its_queues_and_its_runs_durations_as_a_histogram(tmp_path: Path) -> None:
    service = AgentService(Agent("agentA"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path / "state", tmp_path)

    async def scenario() -> None:
        try:
            await service._outcome(job("sleep 0.3", job="Slow"))  # as a run's end comes to the agent
            await service._outcome(job("exit 3", job="Failing"))
        finally:
            await service.supervisor.close()

    asyncio.run(scenario())
    service.journal.close()
    found = scrape(agent_metrics(service))
    agent = {"agent": "agentA"}
    assert at(found, "wfm_agent_events_queued", **agent) == 2  # the two ends, for the agent's loop
    assert at(found, "wfm_agent_runs_waiting", reason="slot", **agent) == 0
    assert at(found, "wfm_agent_runs_running", **agent) == 0
    assert at(found, "wfm_agent_runs_total", outcome="success", **agent) == 1
    assert at(found, "wfm_agent_runs_total", outcome="failure", **agent) == 1
    assert at(found, "wfm_agent_runs_total", outcome="lost", **agent) == 0
    histogram = "wfm_agent_run_duration_seconds"
    assert at(found, f"{histogram}_count", **agent) == 2
    assert at(found, f"{histogram}_sum", **agent) >= 0.3
    assert at(found, f"{histogram}_bucket", le="0.25", **agent) == 1  # exit 3: at once
    assert at(found, f"{histogram}_bucket", le="3600.0", **agent) == 2
    assert at(found, f"{histogram}_bucket", le="+Inf", **agent) == 2


def test_wfm_broker_serves_metrics_over_http(tmp_path: Path) -> None:
    broker = BrokerURI("127.0.0.1", free_port(), "B1")
    address = Address("127.0.0.1", free_port())
    argv = [WFM, "broker", "--uri", str(broker), "--memory", "--metrics", str(address)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: _answers(address.url), "the metrics of B1")
        text = _get(address.url)
        assert 'wfm_broker_info{covering="off",id="B1"' in text
        assert "wfm_broker_clients 0.0" in text
        again = [WFM, "broker", "--uri", f"socket://127.0.0.1:{free_port()}/B2", "--memory"]
        busy = subprocess.run([*again, "--metrics", str(address)], capture_output=True, text=True, timeout=30)
        assert (busy.returncode, busy.stderr) == (
            1,
            f"wfm: error: cannot serve metrics on {address}: address already in use\n",
        )
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "Traceback" not in err


def test_wfm_up_gives_every_process_it_starts_metrics_of_its_own(tmp_path: Path) -> None:
    port, metrics, said, scraped = free_ports(), Address("127.0.0.1", free_ports(4)), [], {}

    def ready(started: Started) -> None:
        said.extend(started.lines())
        try:
            for name, url in started.metrics.items():
                wait_for(lambda url=url: _answers(url), f"the metrics of {name}")
                scraped[name] = _get(url)
        finally:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()

    with stop_event() as stop:
        serve([], [], tmp_path, port, ready, stop, metrics=metrics)
    names = ["broker-B1", "broker-B2", "broker-B3", "historian"]
    assert [line for line in said if line.startswith("metrics ")] == [
        f"metrics  http://127.0.0.1:{metrics.port + i}/metrics ({name})" for i, name in enumerate(names)
    ]
    assert list(scraped) == names
    for i in range(3):
        assert f'id="B{i + 1}"' in scraped[f"broker-B{i + 1}"]
    assert "wfm_historian_written_total 0.0" in scraped["historian"]


def _answers(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


def loaded(argv: Iterable[str]) -> set[str]:
    code = f"import sys; from wfm.cli import main; main({list(argv)!r}); print(*sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())


def test_only_a_process_given_metrics_loads_prometheus_client() -> None:
    assert not {m for m in loaded(["broker", "--help"]) if m.startswith("prometheus_client")}


def test_the_dashboard_counts_the_requests_it_answers_and_shows_its_alerts() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        code = 200 if scope["path"] == "/" else 404
        await send({"type": "http.response.start", "status": code, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    answered: dict[str, int] = {}
    counted = CountRequests(app, answered)

    async def ask(path: str) -> None:
        async def ignore(message: Any) -> None:
            pass

        await counted({"type": "http", "path": path}, ignore, ignore)

    async def scenario() -> None:
        for path in ("/", "/", "/nowhere"):
            await ask(path)

    asyncio.run(scenario())
    dashboard = SimpleNamespace(alert_board=SimpleNamespace(alerts={"a1": None, "a2": None}))
    found = scrape(web_metrics(dashboard, answered))  # type: ignore[arg-type]
    assert at(found, "wfm_web_up") == 1 and at(found, "wfm_web_alerts") == 2
    assert at(found, "wfm_web_requests_total", status="200") == 2
    assert at(found, "wfm_web_requests_total", status="404") == 1


def test_the_grafana_dashboard_shows_documented_metrics_only() -> None:
    docs = Path(__file__).parents[2] / "docs"
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    shown = {re.sub(r"_bucket$", "", name) for q in queries for name in re.findall(r"wfm_\w+", q)}
    documented = set(re.findall(r"`(wfm_\w+)", (docs / "metrics.md").read_text()))
    assert len(queries) > 10 and shown <= documented, shown - documented
    assert any("histogram_quantile(0.99" in q for q in queries)


def test_a_scrape_reads_on_the_loop_and_one_the_loop_cannot_answer_in_time_has_no_wfm_metrics(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("wfm.metrics.exposition.SCRAPE_TIMEOUT", 0.2)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    readers: list[threading.Thread] = []

    def families() -> list[GaugeMetricFamily]:
        readers.append(threading.current_thread())
        return [GaugeMetricFamily("wfm_test", "A test.", value=1)]

    collector = LoopCollector(families)
    collector.loop = loop
    release = threading.Event()
    try:
        assert [family.name for family in collector.collect()] == ["wfm_test"]
        assert readers == [thread]  # read on the loop's thread, not the scraper's
        loop.call_soon_threadsafe(release.wait, 10)  # the loop is busy
        assert list(collector.collect()) == []
        assert "metrics: the event loop did not answer within 0.2 s" in caplog.text
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
