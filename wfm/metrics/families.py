"""What each process exposes, read from the state it keeps anyway (``docs/metrics.md``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from agents import holds
from wfm.metrics.exposition import Families

if TYPE_CHECKING:
    from agents.service import AgentService
    from broker.transport.server import RouterService
    from wfm.history.historian import RecorderService
    from wfm.web.app import Dashboard

__all__ = [
    "BROKER_GAUGES",
    "CountRequests",
    "agent_metrics",
    "broker_metrics",
    "historian_metrics",
    "web_metrics",
]


def _gauge(name: str, help: str, value: float, labels: Mapping[str, str] | None = None) -> GaugeMetricFamily:
    if labels is None:
        return GaugeMetricFamily(name, help, value=value)
    family = GaugeMetricFamily(name, help, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def _by(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    help: str,
    label: str,
    values: Mapping[str, float],
) -> Metric:
    family = kind(name, help, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


# broker: the status a client asks with wfm status, and each broker link's frames
BROKER_GAUGES = {
    "clients": "Clients connected now.",
    "subscriptions": "Entries in the publication routing table (subscriptions, from clients and neighbours).",
    "advertisements": "Entries in the subscription routing table (advertisements).",
    "held_subscriptions": "Subscriptions kept until an advertisement they overlap arrives.",
    "composite_subscriptions": "Composite subscriptions known here.",
    "composite_detected": "Composite subscriptions detected (joined) at this broker.",
    "composite_waiting": "Partial matches waiting for their partners in the detections here.",
    "composite_dropped": "Partial matches the live detections here dropped (past --composite-max-waiting).",
    "sessions_waiting": "Clients and neighbours gone and kept for their grace period.",
    "held": "Messages in custody: sent on and not yet acknowledged, or waiting for their next hop.",
    "held_for_away": "Messages in custody for peers that are away (kept for their grace period).",
    "waiting": "Messages in custody waiting to be sent (a link's backlog, a paused or pulling subscriber).",
    "stand_ins": "Stand-in requests made for neighbours' advertisements.",
    "publishers": "Publishers whose sequence numbers this broker keeps (duplicate detection).",
    "mids": "Publishers' own message ids this broker remembers (idempotent publishing).",
    "retained": "Retained publications kept for later subscriptions.",
    "leases": "Subscriptions and advertisements held under a lease.",
}


def broker_metrics(service: RouterService) -> Families:
    """``wfm_broker_*``: every status counter (the router's, ``link.*`` the process's) as
    ``wfm_broker_events_total{event}``, the table sizes and custody as gauges, and each broker
    link's frames as counters labelled by ``peer``."""

    def families() -> Iterator[Metric]:
        status = service.status()
        described = {"id": str(status["id"]), "uri": str(service.uri)}
        described |= {key: str(status.get(key, "")) for key in ("routing", "covering", "ordering")}
        yield InfoMetricFamily("wfm_broker", "This broker: its id, URI and modes.", value=described)
        yield _by(
            CounterMetricFamily,
            "wfm_broker_events",
            "What the broker counted, by event: in.<Message> (messages handled, e.g. in.Publish "
            "for publications from clients), dropped.*, refused.*, link.* (the transport's).",
            "event",
            status["counters"],
        )
        yield _gauge("wfm_broker_neighbors", "Neighbour brokers linked now.", len(status["neighbors"]))
        for key, help in BROKER_GAUGES.items():
            if isinstance(status.get(key), int | float):
                yield _gauge(f"wfm_broker_{key}", help, status[key])
        neighbors = service.router.tables.neighbors
        links = {hop: link for hop, link in service.links.items() if hop in neighbors}
        sent = CounterMetricFamily(
            "wfm_broker_link_frames_sent", "Frames sent on the link to a neighbour broker.", labels=["peer"]
        )
        received = CounterMetricFamily(
            "wfm_broker_link_frames_received",
            "Frames received on the link from a neighbour broker.",
            labels=["peer"],
        )
        queued = GaugeMetricFamily(
            "wfm_broker_link_queued_bytes",
            "Bytes queued for a neighbour broker and not yet written to its socket.",
            labels=["peer"],
        )
        for hop, link in sorted(links.items()):
            sent.add_metric([hop], link.sent_frames)
            received.add_metric([hop], link.received_frames)
            queued.add_metric([hop], link.buffered())
        yield from (sent, received, queued)

    return families


def agent_metrics(service: AgentService) -> Families:
    """``wfm_agent_*``: the queues (events waiting for the loop, runs waiting for a slot or a
    retry, runs running, statuses waiting for the broker's acknowledgement), the runs' durations
    as a histogram and their ends by outcome."""

    def families() -> Iterator[Metric]:
        agent, durations = service.agent, service.durations
        labels = {"agent": agent.name}
        queued = service.events.queue.qsize()
        yield _gauge("wfm_agent_events_queued", "Events waiting for the agent's loop.", queued, labels)
        waiting = GaugeMetricFamily(
            "wfm_agent_runs_waiting",
            "Runs waiting: for a job slot (reason=slot), for their retry's backoff (reason=retry),"
            " for wfm release (reason=held), for wfm approve (reason=approval).",
            labels=["agent", "reason"],
        )
        held = [p for p in agent.pending if holds.held(agent, p.run.workflow, p.run.gid, p.run.job)]
        retrying = sum(1 for pending in agent.pending if pending.at is not None and pending not in held)
        waiting.add_metric([agent.name, "slot"], len(agent.pending) - retrying - len(held))
        waiting.add_metric([agent.name, "retry"], retrying)
        waiting.add_metric([agent.name, "held"], len(held))
        waiting.add_metric([agent.name, "approval"], len(agent.approvals))
        yield waiting
        yield _gauge("wfm_agent_runs_running", "Runs whose command runs now.", len(agent.running), labels)
        yield _gauge("wfm_agent_max_jobs", "Runs run at once at most (--max-jobs).", agent.max_jobs, labels)
        yield _gauge("wfm_agent_generations", "Generations in progress here.", len(agent.generations), labels)
        outbox = service.client.stats()["outbox"] if service.client is not None else len(service.outbox)
        yield _gauge("wfm_agent_outbox", "Publications not yet acknowledged by the broker.", outbox, labels)
        ends = CounterMetricFamily(
            "wfm_agent_runs",
            "Runs ended, by outcome: success, failure (each failed attempt), lost (the supervisor died).",
            labels=["agent", "outcome"],
        )
        for outcome in ("success", "failure", "lost"):
            ends.add_metric([agent.name, outcome], durations.outcomes[outcome])
        yield ends
        histogram = HistogramMetricFamily(
            "wfm_agent_run_duration_seconds",
            "How long runs took, from their command's start to its end.",
            labels=["agent"],
        )
        buckets = [(_bound(bound), count) for bound, count in durations.cumulative()]
        histogram.add_metric([agent.name], buckets, durations.sum)
        yield histogram
        yield _by(
            CounterMetricFamily,
            "wfm_agent_errors",
            "Unexpected errors in handling one message (the agent went on), by where.",
            "where",
            service.errors,
        )

    return families


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def historian_metrics(service: RecorderService) -> Families:
    """``wfm_historian_*``: publications received and written to the landing log, its fsync'd
    batches, what waits for the next, refusals, compactions."""

    def families() -> Iterator[Metric]:
        landing = service.landing
        yield CounterMetricFamily(
            "wfm_historian_received",
            "Publications received and appended to the landing log (each id once).",
            value=service.recorder.landed,
        )
        yield CounterMetricFamily(
            "wfm_historian_written", "Publications written and fsync'd.", value=landing.durable
        )
        yield CounterMetricFamily(
            "wfm_historian_batches", "Batches written (one fsync each).", value=landing.batches
        )
        yield GaugeMetricFamily(
            "wfm_historian_pending", "Publications received and not yet written.", value=landing.pending
        )
        yield _by(
            CounterMetricFamily,
            "wfm_historian_refused",
            "Publications not kept (with TLS: not signed by whom agents take them from), by kind.",
            "kind",
            service.refused,
        )
        yield _by(
            CounterMetricFamily,
            "wfm_historian_compactions",
            "Compactions of the landing log into the store, by outcome: done, failed.",
            "outcome",
            {"done": 0, "failed": 0} | dict(service.compactions),
        )
        yield GaugeMetricFamily(
            "wfm_historian_connected",
            "1 while connected to a broker.",
            value=int(service.client is not None and service.client.connected),
        )

    return families


def web_metrics(dashboard: Dashboard, requests: Mapping[str, int]) -> Families:
    """``wfm_web_*``: up, the alerts waiting for an acknowledgement, requests served by status."""

    def families() -> Iterator[Metric]:
        yield GaugeMetricFamily("wfm_web_up", "1: the dashboard serves.", value=1)
        yield GaugeMetricFamily(
            "wfm_web_alerts", "Alerts no one has acknowledged yet.", value=len(dashboard.alert_board.alerts)
        )
        answered = "HTTP requests answered, by status."
        yield _by(CounterMetricFamily, "wfm_web_requests", answered, "status", requests)

    return families


class CountRequests:
    """ASGI middleware: counts every HTTP response by its status code into ``counts``."""

    def __init__(self, app: Any, counts: dict[str, int]) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                code = str(message["status"])
                self.counts[code] = self.counts.get(code, 0) + 1
            await send(message)

        await self.app(scope, receive, counted)
