"""Where the dashboard's data comes from, in one module so another source can replace one of them:
the overlay (each broker's status, walked from broker to broker), the workflows (what the agents
say is deployed, asked with ``wfm.operations.Session``; a directory of XML files adds what is not
deployed as written), the history store (Spark, started on first use), triggers
(``wfm.triggers``) and the deployer's key for cancel and rerun. The web layer only calls these.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from agents.trust import OPERATOR_ROLES
from broker.client import Client
from broker.client.reconnect import BrokerList, brokers
from broker.errors import WfmError
from broker.transport.tls import Identity
from wfm.certs import listing
from wfm.operations import Deployed
from wfm.signing import Deployer, signer_of
from wfm.triggers import TriggerPublisher, check_workflow, new_gid
from wfm.workflow import DefinitionError, Workflow, load

__all__ = [
    "Declined",
    "HistoryReader",
    "OverlayWatcher",
    "deployer",
    "described",
    "require_operator",
    "role_of",
    "trigger",
    "workflows",
]

STATUS_TIMEOUT = 3.0  # seconds for a broker to answer a status: a stuck broker must not stall the page


class Declined(WfmError):
    """What the dashboard will not do for this user, in one line (shown on the page)."""


# workflows --------------------------------------------------------------------------------------


def workflows(directory: Path | None) -> list[dict[str, Any]]:
    """Every ``*.xml`` in ``directory`` as JSON-ready data: name, version, agents and jobs (agent,
    schedule, after: [job, on]); a file that does not load is listed with its ``error``."""
    if directory is None:
        return []
    found: list[dict[str, Any]] = []
    for file in sorted(directory.glob("*.xml")):
        try:
            workflow = load(file)
        except (DefinitionError, OSError) as error:
            found.append({"file": file.name, "error": str(error).splitlines()[0]})
            continue
        found.append(_described(workflow, file))
    return found


def _described(workflow: Workflow, file: Path) -> dict[str, Any]:
    return {
        "name": workflow.name,
        "version": workflow.version(),
        "file": file.name,
        "agents": list(workflow.agents),
        "coordinator": workflow.coordinator,
        "jobs": [job.definition() for job in workflow.jobs],
        "deployed": False,
    }


def described(deployed: Sequence[Deployed], files: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Workflows page's list: each workflow the agents say is deployed (its current version,
    older versions still deployed, agents, jobs in the coordinator's order, ``missing``: jobs whose
    agent did not answer), then what the directory adds: a file of a workflow no agent has, or of
    another version than the deployed one (``file_version`` on it), or one that does not load."""
    found = []
    for workflow in deployed:
        order = list(workflow.graph) if workflow.graph is not None else sorted(workflow.jobs)
        graph = workflow.graph or {}
        found.append(
            {
                "name": workflow.workflow,
                "version": workflow.version,
                "older": sorted(workflow.versions - {workflow.version}),
                "agents": sorted(workflow.agents),
                "coordinator": workflow.coordinator or "?",
                "jobs": [
                    {
                        "job": job,
                        "agent": workflow.jobs.get(job, {}).get("agent", "?"),
                        "schedule": workflow.jobs.get(job, {}).get("schedule", "?"),
                        "after": graph.get(job, []),
                        # <wait>, <event>: only a job that has them says so
                        **{k: v for k, v in workflow.jobs.get(job, {}).items() if k == "conditions"},
                    }
                    for job in order
                ],
                "missing": workflow.unanswered(),
                "deployed": True,
                **({"holds": workflow.on_hold()} if workflow.holds else {}),  # wfm hold's, in words
            }
        )
    by_name = {d["name"]: d for d in found}
    for file in files:
        same = by_name.get(file.get("name", ""))
        if same is None:
            found.append(file)
        elif file["version"] != same["version"]:
            same["file"], same["file_version"] = file["file"], file["version"]
    return found


# the overlay ------------------------------------------------------------------------------------


@dataclass
class OverlayWatcher:
    """Walks the overlay from the ``seeds``: every broker reached is asked for its status, and
    the neighbours it dials (``neighbor_uris``) are visited next. A broker another one dials is
    only reached if it is a seed (a broker does not know the address of one that dialled it): give
    every broker, or the far end of a line, as seeds. One connection per broker, kept."""

    seeds: BrokerList
    tls: Identity | None = None
    clients: dict[str, Client] = field(default_factory=dict)
    # broker id -> (when, its counters) at the last walk: the rates are the difference
    last: dict[str, tuple[float, dict[str, int]]] = field(default_factory=dict)

    async def snapshot(self) -> dict[str, Any]:
        """``{"brokers": [...], "links": [[a, b], ...]}``: each broker as :func:`summary` says, or
        ``{"id", "reached": false, "error"}`` for one named but not answering."""
        to_visit = [str(uri) for uri in self.seeds]
        statuses: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        visited: set[str] = set()
        while to_visit:
            uri = to_visit.pop(0)
            if uri in visited:
                continue
            visited.add(uri)
            try:
                status = await self.status(uri, detail=True)  # its tables name its clients
            except (WfmError, OSError, TimeoutError) as error:
                errors[uri.rsplit("/", 1)[-1]] = str(error) or type(error).__name__
                continue
            statuses[str(status["id"])] = status
            to_visit += [u for u in dict(status.get("neighbor_uris") or {}).values() if u not in visited]
        now = time.monotonic()
        for name, status in statuses.items():
            sent = {hop: frames[1] for hop, frames in dict(status.get("link_frames") or {}).items()}
            counters = {**dict(status.get("counters") or {}), **{SENT + hop: n for hop, n in sent.items()}}
            before = self.last.get(name)
            status["rates"] = rates(before, (now, counters))
            status["link_rates"] = rates(before, (now, counters), {hop: SENT + hop for hop in sent})
            self.last[name] = (now, counters)
        return overlay_view(statuses, errors)

    async def status(self, uri: str, detail: bool = False) -> dict[str, Any]:
        client = self.clients.get(uri)
        if client is None:
            async with asyncio.timeout(STATUS_TIMEOUT * 2):
                client = await Client.connect(brokers(uri).secured(self.tls), timeout=STATUS_TIMEOUT)
            self.clients[uri] = client
        try:
            async with asyncio.timeout(STATUS_TIMEOUT):
                return await client.status(detail)
        except BaseException:
            self.clients.pop(uri, None)
            with contextlib.suppress(Exception):
                await client.close()
            raise

    async def detail(self, broker_id: str) -> dict[str, Any]:
        """One broker's status with its tables (Declined if the broker is unknown)."""
        for uri in list(self.clients):
            if uri.rsplit("/", 1)[-1] == broker_id:
                return await self.status(uri, detail=True)
        raise Declined(f"broker {broker_id} is not reached by the dashboard")

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


def overlay_view(statuses: dict[str, dict[str, Any]], errors: dict[str, str]) -> dict[str, Any]:
    """The graph: brokers reached (sorted by id), then those named by a neighbour or a seed but not
    reached; a link for every pair of linked brokers, once."""
    found = [summary(statuses[name]) for name in sorted(statuses)]
    named = {n for s in statuses.values() for n in s.get("neighbors", ())} | errors.keys()
    found += [
        {"id": name, "reached": False, "error": errors.get(name, "not reached")}
        for name in sorted(named - statuses.keys())
    ]
    links = sorted({tuple(sorted((name, n))) for name, s in statuses.items() for n in s.get("neighbors", ())})
    speeds = []  # [a, b, frames a sent b, frames b sent a] per second, once an end was seen twice
    for a, b in links:
        ab = dict(statuses.get(a, {}).get("link_rates") or {}).get(b)
        ba = dict(statuses.get(b, {}).get("link_rates") or {}).get(a)
        if ab is not None or ba is not None:
            speeds.append([a, b, ab, ba])
    return {"brokers": found, "links": [list(link) for link in links], "link_rates": speeds}


RATED = {"publications": "in.Publish", "deliveries": "delivered", "carried": "in.Carry"}
SENT = "sent to "  # before a neighbour's id: the frames a broker sent it, among its counters


def rates(
    before: tuple[float, dict[str, int]] | None,
    now: tuple[float, dict[str, int]],
    rated: Mapping[str, str] = RATED,
) -> dict[str, float]:
    """Per second, each counter ``rated`` names (name -> counter) between two walks ({} at the
    first; a counter that went back, a broker restarted, counts 0)."""
    if before is None or now[0] <= before[0]:
        return {}
    seconds = now[0] - before[0]
    return {
        name: round(max(now[1].get(key, 0) - before[1].get(key, 0), 0) / seconds, 2)
        for name, key in rated.items()
    }


def hosted(status: dict[str, Any]) -> list[str] | None:
    """The identities of the clients whose requests are in the broker's tables (``agentB`` for the
    hop ``agentB:agentB-1``), from the first entries of its SRT and PRT the status carries;
    None when the status has no tables (withheld from this identity's role)."""
    tables = [status[key] for key in ("srt", "prt") if isinstance(status.get(key), dict)]
    if not tables:
        return None
    neighbours = set(status.get("neighbors") or ()) | set(status.get("away") or ())
    hops = {str(entry.get("hop", "")) for table in tables for entry in table.get("entries", ())}
    return sorted(
        {hop.split(":")[0] for hop in hops if hop and hop not in neighbours and not hop.startswith("Local.")}
    )


def summary(status: dict[str, Any]) -> dict[str, Any]:
    """What the overlay page shows of one broker's status."""
    counters: dict[str, int] = dict(status.get("counters") or {})
    return {
        "hosted": hosted(status),
        "rates": status.get("rates", {}),
        "problems": {k: v for k, v in sorted(counters.items()) if _problem(k)},
        "id": status["id"],
        "reached": True,
        "uri": status.get("uri", ""),
        "clients": status.get("clients", 0),
        "subscriptions": status.get("subscriptions", 0),
        "advertisements": status.get("advertisements", 0),
        "composites": status.get("composite_subscriptions", 0),
        "covering": status.get("covering", ""),
        "publications": counters.get("in.Publish", 0),
        "deliveries": counters.get("delivered", 0),
        "drops": sum(v for k, v in counters.items() if k.startswith("dropped.")),
        "refusals": sum(v for k, v in counters.items() if k.startswith("refused")),
    }


def _problem(counter: str) -> bool:
    return counter.startswith(("refused", "dropped.", "unheld.", "unconfirmed.", "link.dropped."))


# triggering -------------------------------------------------------------------------------------


def role_of(tls: Identity | None) -> str | None:
    """The role in the dashboard's own certificate (None without TLS: no roles then)."""
    if tls is None:
        return None
    roles = {issued.name: issued.role for issued in listing(tls.directory)}
    return roles.get(tls.name, "")


def require_operator(tls: Identity | None, doing: str) -> None:
    """Declined, naming the dashboard's identity and role, unless it is a deployer or an operator
    (with TLS on): the roles whose Triggers, CANCELs and RERUNs agents act on."""
    role = role_of(tls)
    if role is not None and role not in OPERATOR_ROLES:
        assert tls is not None
        raise Declined(
            f"the dashboard runs as {tls.name} (role {role or 'none'}): {doing} needs role"
            f" {' or '.join(OPERATOR_ROLES)}; start wfm web with --identity of a deployer or an operator"
        )


def deployer(tls: Identity | None) -> Deployer:
    """Who signs the dashboard's cancel and rerun: its TLS identity, else the local deployer key
    (``wfm deploy``'s default, which agents without TLS pinned). Call :func:`require_operator` first."""
    return signer_of(tls)


def trigger(uri: BrokerList, tls: Identity | None, workflow: str, today: date | None = None) -> str:
    """Publish a Trigger for ``workflow`` (today's date, a new gid) as the dashboard's identity; its
    gid. Declined, before anything is sent, if that identity is not a deployer (with TLS on) or the
    workflow name is not one; a broker that does not take it raises as ``TriggerPublisher`` does."""
    require_operator(tls, "triggering")
    try:
        check_workflow(workflow)
    except ValueError as error:
        raise Declined(str(error)) from None
    gid = new_gid(datetime.now())
    with TriggerPublisher(uri.secured(tls)) as publisher:
        publisher.publish(workflow, gid, today or date.today())
    return gid


# history ----------------------------------------------------------------------------------------


class HistoryReader:
    """The history store behind the History page. Spark starts in a thread on the first request
    (``state`` says ``starting`` meanwhile), so the other pages never wait for it; a report is
    computed in that thread too, and its result kept until the next request with other arguments."""

    def __init__(self, store: Path | None, open_store: Callable[[Path], Any] | None = None) -> None:
        self.store = store
        self._open = open_store or _open_store
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="wfm-web-spark")
        self._lock = threading.Lock()
        self._opened: Future[Any] | None = None
        self._reports: dict[tuple[Any, ...], Future[Any]] = {}

    def report(self, compute: Callable[[Any], Any], *key: Any) -> tuple[str, Any]:
        """``("ready", result)`` of ``compute(store)``, or ``("starting", None)`` while Spark
        starts, ``("computing", None)`` while it runs, ``("error", message)``, ``("none", None)``
        without a store."""
        if self.store is None:
            return "none", None
        with self._lock:
            if self._opened is None:
                store = self.store
                self._opened = self._pool.submit(self._open, store)
            if not self._opened.done():
                return "starting", None
            if (error := self._opened.exception()) is not None:
                return "error", str(error)
            future = self._reports.get(key)
            if future is None:
                opened = self._opened.result()
                self._reports = {key: self._pool.submit(compute, opened)}
                future = self._reports[key]
        if not future.done():
            return "computing", None
        if (error := future.exception()) is not None:
            return "error", str(error).splitlines()[0] if str(error) else type(error).__name__
        return "ready", future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _open_store(path: Path) -> Any:
    from wfm.history.queries import open_store  # Spark: loaded only when the History page is asked for

    return open_store(path, None)
