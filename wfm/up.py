"""``wfm up``: the embedded default on one machine. Three brokers in a line, one agent per agent
name of the workflows in a directory, every workflow deployed; runs until SIGINT/SIGTERM.

Everything is a child process running the ``wfm`` command line, exactly as a user would start it
by hand, so the embedded default exercises the same code as a distributed installation. Children
run in their own sessions: Ctrl-C reaches ``wfm up`` only, which then stops them in reverse order
(agents before brokers), so a child that exits on its own is a failure worth reporting (the one
optional child, the Spark Connect server, only gets a warning: brokers and agents need no Java).
A historian on B1 keeps Trigger, JOBSTATUS and AGENT_CTL in ``DIR/.wfm/history`` (started before
the agents, so it sees every generation). A Spark Connect server beside that store keeps one JVM
warm for ``wfm history --store``, ``wfm report`` and the historian, which is given its address and
opens a session only when it first needs Spark (a compaction or a query of the table).

Secure by default: on its first run it makes a CA and an identity for every process under
``DIR/.wfm/certs`` (kept for later runs; a new agent gets one), every child runs over mutual TLS,
and it prints the ``export WFM_TLS=... WFM_IDENTITY=deployer`` a user needs to talk to it.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import secrets
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from broker.client import BlockingClient, Brokers, ConnectError
from broker.errors import LocalError
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from wfm.certs import ensure
from wfm.metrics import Address
from wfm.topology import Topology
from wfm.workflow import Workflow

__all__ = [
    "WFM",
    "Child",
    "Layout",
    "Metered",
    "Processes",
    "Started",
    "UpError",
    "agent_children",
    "agent_names",
    "broker_children",
    "identities",
    "linked",
    "serve",
]

WFM = [sys.executable, "-m", "wfm.cli"]  # the children's command line: this interpreter's wfm
HOST = "127.0.0.1"
BROKER_IDS = ("B1", "B2", "B3")
HISTORIAN = "historian"
DEPLOYER = "deployer"  # wfm up's deployments, and the user's wfm trigger, deploy and monitor
WATCHER = "monitor"  # wfm up's own checks of the brokers
WEB_TIMEOUT = 30.0  # seconds the dashboard may take to listen before wfm up goes on without it
RESTART_AFTER = 2.0  # seconds a child to restart must have run: one that dies sooner cannot start
SPARK_NICE = 10  # the Spark Connect server's CPU priority below the rest: a standby for history queries


class UpError(LocalError):
    """A one-line reason why ``wfm up`` could not start or keep running."""


@dataclass(frozen=True)
class Child:
    """A process to run: a name for messages and log files, and its command line."""

    name: str
    argv: tuple[str, ...]
    optional: bool = False  # if it exits, wfm up warns and carries on without it
    # if it exits, wfm up warns and starts it again (a broker of a replicated site: its site serves
    # meanwhile, and it comes back from its log); one that exits within RESTART_AFTER is not
    restart: bool = False
    environment: tuple[tuple[str, str], ...] = ()  # added to ours (a secret: not on the command line)


@dataclass(frozen=True)
class Layout:
    """Where ``wfm up``'s brokers listen, whom each dials, and which brokers each agent uses: the
    line B1 - B2 - B3 by default, or what a SESDAD topology file says (docs/puppet.md)."""

    dials: dict[BrokerURI, tuple[BrokerURI, ...]]  # every broker, in start order
    agents: dict[str, str]  # agent -> its --broker list, for the agents the topology places
    # every router by name: the brokers that serve it and the routers it links with, once up
    routers: Mapping[str, tuple[tuple[BrokerURI, ...], frozenset[str]]]
    routing: str = "filter"  # every broker's --routing: the topology's RoutingPolicy
    # broker id -> its options from the topology (routing, ordering, replicated site)
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def line(cls, port: int) -> Layout:
        """B1 - B2 - B3 on ports P, P+1, P+2, each dialling the one before it."""
        uris = [BrokerURI(HOST, port + i, broker_id) for i, broker_id in enumerate(BROKER_IDS)]
        routers = {
            uri.id: ((uri,), frozenset(other.id for other in uris[max(0, i - 1) : i + 2] if other != uri))
            for i, uri in enumerate(uris)
        }
        return cls({uri: tuple(uris[i - 1 : i]) for i, uri in enumerate(uris)}, {}, routers)

    @classmethod
    def of(cls, topology: Topology) -> Layout:
        """The topology's brokers (a port 0 becomes a free one), links and RoutingPolicy; its
        agents connect to their site's brokers, failing over along them."""
        for process in topology.of_role("broker"):
            if not ipaddress.ip_address(_address(process.host)).is_loopback:
                raise UpError(
                    f"{topology.source}:{process.line}: {process.name} is on {process.host}, but wfm up "
                    "runs every process on this machine (start brokers elsewhere with wfm broker --topology)"
                )
        placed = topology.with_ports()
        brokers = [p.name for p in placed.of_role("broker")]
        agents = {p.name: str(placed.brokers_for(p.name)) for p in placed.of_role("agent")}
        routers = {name: (tuple(uris), linked) for name, (uris, linked) in placed.routers().items()}
        dials = {placed.uri(b): tuple(placed.neighbours(b)) for b in brokers}
        options = {b: placed.broker_options(b) for b in brokers}
        return cls(dials, agents, routers, placed.routing_policy, options)

    @property
    def uris(self) -> list[BrokerURI]:
        return list(self.dials)

    @property
    def entries(self) -> list[str]:
        """How a client reaches each router (``--broker``): a replicated site by all its brokers."""
        return [",".join(str(uri) for uri in serving) for serving, _ in self.routers.values()]


def _address(host: str) -> str:
    """An IP address for ``host`` (``localhost`` and the like resolved); the host if unresolvable,
    which then fails as not an address."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def identities(agents: Iterable[str], brokers: Iterable[str] = BROKER_IDS) -> dict[str, str]:
    """Every identity ``wfm up`` runs a process as: name -> role. UpError for a name given two
    roles (a broker named like an agent would share its certificate, or get the wrong one)."""
    named: dict[str, str] = {}
    for names, role in (
        (brokers, "broker"),
        (agents, "agent"),
        ([HISTORIAN], "historian"),  # subscribes to everything, publishes (signed) history answers only
        ([DEPLOYER], "deployer"),
        ([WATCHER], "monitor"),
    ):
        for name in names:
            if named.setdefault(name, role) != role:
                raise UpError(f"{name} would be both {named[name]} and {role}: rename one")
    return named


def _as(certs: Path | None, name: str) -> tuple[str, ...]:
    """The options that make a child run as identity ``name`` (none without certificates)."""
    return () if certs is None else ("--tls", str(certs), "--identity", name)


def broker_children(
    port: int | Layout, state: Path, certs: Path | None = None
) -> tuple[list[BrokerURI], list[Child]]:
    """B1 - B2 - B3 on ports P, P+1, P+2 (or the brokers of a ``Layout``); each dials the one
    before it and keeps its write-ahead log in ``state/brokers/ID``, so a broker that is killed
    comes back with what it held. With ``certs``, each runs over TLS as the identity of its id."""
    layout = Layout.line(port) if isinstance(port, int) else port
    children = [
        Child(
            f"broker-{uri.id}",
            (
                *WFM,
                "broker",
                "--uri",
                str(uri),
                "--data",
                str(state / "brokers" / uri.id),
                *(arg for neighbour in dials for arg in ("--neighbor", str(neighbour))),
                *layout.options.get(uri.id, ("--routing", layout.routing)),
                *_as(certs, uri.id),
            ),
            restart="--site" in layout.options.get(uri.id, ()),
        )
        for uri, dials in layout.dials.items()
    ]
    return layout.uris, children


def agent_names(workflows: Iterable[Workflow]) -> list[str]:
    """Every agent the workflows name, once each, in order of first mention."""
    return list(dict.fromkeys(agent for workflow in workflows for agent in workflow.agents))


def agent_children(
    agents: Sequence[str],
    uris: Sequence[BrokerURI | str],
    state: Path,
    certs: Path | None = None,
    placed: Mapping[str, str] | None = None,
) -> list[Child]:
    """One agent per name, on the brokers ``placed`` names for it, or else spread over the brokers
    round-robin, each with its own state directory (and, with ``certs``, as the identity of its
    name)."""
    placed = placed or {}
    return [
        Child(
            f"agent-{name}",
            (
                *WFM,
                "agent",
                "--name",
                name,
                "--broker",
                placed.get(name, str(uris[i % len(uris)])),
                "--state-dir",
                str(state / name),
                *_as(certs, name),
            ),
        )
        for i, name in enumerate(agents)
    ]


@dataclass
class Metered:
    """``wfm up --metrics HOST:PORT``: each child given ``--metrics``, the first on PORT, each next
    one on the port after (UpError past 65535); ``urls`` says whose metrics are where."""

    address: Address | None
    urls: dict[str, str] = field(default_factory=dict)  # child name -> its /metrics URL

    def __call__(self, child: Child) -> Child:
        if self.address is None:
            return child
        try:
            address = self.address.shifted(len(self.urls))
        except ValueError as error:
            raise UpError(f"--metrics {error}") from None
        self.urls[child.name] = address.url
        return replace(child, argv=(*child.argv, "--metrics", str(address)))


class Processes:
    """Children started in order and stopped in reverse; output of each goes to ``LOGS/NAME.log``."""

    def __init__(self, logs: Path, warn: Callable[[str], None]) -> None:
        self.logs = logs
        self.warn = warn
        self.running: list[tuple[Child, subprocess.Popen[bytes]]] = []
        self.started: dict[str, float] = {}  # child name -> when it was last started

    def start(self, child: Child) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.log(child), "ab") as log:
            process = subprocess.Popen(
                child.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, **dict(child.environment)},
            )
        self.running.append((child, process))
        self.started[child.name] = time.monotonic()

    def log(self, child: Child) -> Path:
        return self.logs / f"{child.name}.log"

    def check(self) -> None:
        """UpError naming the first child that has exited, with the last line of its log; an
        optional child that exited is named in a warning and forgotten, one to restart is started
        again (unless it could not even stay up for ``RESTART_AFTER`` seconds)."""
        for child, process in list(self.running):
            if process.poll() is None:
                continue
            exited = f"{child.name} exited with status {process.returncode}{self._last_line(child)}"
            lasted = time.monotonic() - self.started.get(child.name, 0.0)
            if child.restart and lasted >= RESTART_AFTER:
                self.warn(f"warning: {exited}; starting it again")
                self.running.remove((child, process))
                self.start(child)
                continue
            if not child.optional:
                raise UpError(exited)
            self.warn(f"warning: {exited}; carrying on without it")
            self.running.remove((child, process))

    def _last_line(self, child: Child) -> str:
        try:
            lines = self.log(child).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {lines[-1].strip()} (log: {self.log(child)})" if lines else f" (log: {self.log(child)})"

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM to all at once (agents first), wait up to ``grace`` seconds in all, then SIGKILL
        the rest. Brokers, agents and the historian exit within a second of SIGTERM; the grace is
        for a JVM (Spark Connect) still starting."""
        for _, process in reversed(self.running):
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + grace
        for _, process in reversed(self.running):
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def linked(uri: Brokers, neighbours: Set[str], tls: Identity | None = None) -> bool:
    """Whether the broker at ``uri`` (or the one of them that serves their site) answers and is
    linked to exactly ``neighbours`` (the names of routers: a broker's id, a replicated site's
    name)."""
    try:
        with BlockingClient(uri, timeout=2, tls=tls) as client:
            report = client.status()
    except (ConnectError, OSError, TimeoutError):
        return False
    return set(report.get("neighbors", ())) == neighbours  # type: ignore[call-overload]


@dataclass(frozen=True)
class Started:
    """What ``wfm up`` runs once it is up: shown as text lines or one JSON object."""

    brokers: list[BrokerURI]
    agents: list[str]
    logs: Path
    deployed: list[str]
    history: Path
    spark: str | None
    web: str | None
    certs: Path
    entry: str = ""  # how a client reaches the first router: its brokers (a site's), else the first
    metrics: Mapping[str, str] = field(default_factory=dict)  # child name -> its /metrics URL

    @property
    def first(self) -> str:
        return self.entry or str(self.brokers[0])

    def lines(self) -> list[str]:
        """What to paste and try: the exports, and a trigger followed by a monitor that catches up
        with it (a monitor started after the trigger sees its generation from the history)."""
        first = self.first
        example = self.deployed[0] if self.deployed else "WORKFLOW"
        return [
            f"brokers  {' '.join(str(uri) for uri in self.brokers)}",
            f"agents   {', '.join(self.agents)} (logs in {self.logs})",
            f"deployed {', '.join(self.deployed)}",
            f"history  {self.history} (wfm history FILTER --broker {first})",
            *([f"spark    {self.spark} (kept warm for wfm history/report --store)"] if self.spark else []),
            *([f"web      {self.web} (the dashboard)"] if self.web else []),
            *(f"metrics  {url} ({name})" for name, url in self.metrics.items()),
            f"tls      every link, certificates in {self.certs} (wfm certs list)",
            *(f"export {name}={shlex.quote(value)}" for name, value in self.environment().items()),
            f'try: wfm monitor {example} --gid "$(wfm trigger {example})"',
        ]

    def environment(self) -> dict[str, str]:
        return {"WFM_TLS": str(self.certs), "WFM_IDENTITY": DEPLOYER, "WFM_BROKER": self.first}

    def record(self) -> dict[str, object]:
        return {
            "brokers": [str(uri) for uri in self.brokers],
            "agents": self.agents,
            "logs": str(self.logs),
            "deployed": self.deployed,
            "history": str(self.history),
            "spark": self.spark,
            "web": self.web,
            "certs": str(self.certs),
            "metrics": dict(self.metrics),
            "environment": self.environment(),
        }


def _ignore(_: str) -> None:
    pass


def _bindable(port: int) -> bool:
    """Whether the dashboard could listen on ``port``: checked before it starts, because another
    program's server there would answer :func:`_serving` in its stead, and the URL printed would
    open that program."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _serving(
    dashboard: Child, port: int, processes: Processes, stop: threading.Event, warn: Callable[[str], None]
) -> bool:
    """Whether the dashboard listens on ``port`` (within WEB_TIMEOUT): its URL is printed only
    then, so that it answers when opened (under load its start took longer than the deploys)."""
    deadline = time.monotonic() + WEB_TIMEOUT
    while any(child is dashboard for child, _ in processes.running):
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return True
        except OSError:
            pass
        if time.monotonic() > deadline:
            warn(f"warning: the dashboard did not listen on port {port} within {WEB_TIMEOUT:g} s")
            return False
        processes.check()  # an optional child that exited is warned of and forgotten
        if stop.wait(0.1):
            return False
    return False


def serve(
    workflows: Sequence[tuple[str, Path]],
    agents: Sequence[str],
    home: Path,
    port: int,
    ready: Callable[[Started], None],
    stop: threading.Event,
    deploy_timeout: float = 60.0,
    link_timeout: float = 15.0,
    spark_port: int | None = None,
    web_port: int | None = None,
    say: Callable[[str], None] = _ignore,
    warn: Callable[[str], None] = _ignore,
    topology: Topology | None = None,
    metrics: Address | None = None,
) -> None:
    """Start everything, deploy ``workflows`` (name, file), tell ``ready`` what runs, then wait
    until ``stop`` is set and stop everything; ``say`` hears each step of the start, ``warn``
    what goes wrong without stopping it. With ``spark_port``, a Spark Connect server on it keeps
    Spark warm for the history store and the historian (it starts in the background: a JVM takes
    seconds; without Java it exits and wfm up warns and goes on). With ``web_port``, the dashboard
    (``wfm web``) on it, as the deployer (optional too: a port in use costs the dashboard, not the
    rest). With ``topology``, its brokers and agents' places instead of the line on ``port``.
    With ``metrics``, each child but Spark Connect serves Prometheus metrics: the first broker on
    its port, each next child on the port after (:class:`Metered`).
    UpError if another wfm up runs in ``home``, if another child exits on its own, the brokers do
    not link or a deploy fails (everything started is stopped first)."""
    layout = Layout.line(port) if topology is None else Layout.of(topology)
    lock = _lock(home)
    processes = Processes(home / "logs", warn)
    metered = Metered(metrics)
    try:
        certs = ensure(home / "certs", identities(agents, [uri.id for uri in layout.uris])).absolute()
        watcher = Identity(certs, WATCHER)
        say("starting brokers")
        uris, brokers = broker_children(layout, home, certs)
        for child in brokers:
            processes.start(metered(child))
        deadline = time.monotonic() + link_timeout
        for name, (serving, expected) in layout.routers.items():
            while not linked(serving, expected, watcher):
                processes.check()
                if stop.wait(0.1):
                    return
                if time.monotonic() > deadline:
                    raise UpError(
                        f"{name} did not link to {', '.join(sorted(expected))} within {link_timeout:g} s"
                    )
        say("brokers linked; starting the historian and the agents")
        history: tuple[str, ...] = ("--store", str(home / "history"))
        if spark_port is not None:
            # niced: while it warms up (seconds of JIT) it must not take CPU from a workflow
            spark = ("spark-connect", *history, "--port", str(spark_port), "--nice", str(SPARK_NICE))
            processes.start(Child("spark-connect", (*WFM, *spark), optional=True))
            history += ("--spark-master", f"sc://{HOST}:{spark_port}")
        entries = layout.entries  # the first is the root site's
        historian = ("historian", "--broker", entries[0], *history, *_as(certs, HISTORIAN))
        processes.start(metered(Child("historian", (*WFM, *historian))))
        token = secrets.token_urlsafe(32)  # the dashboard's, given to it and printed with its URL
        if web_port is not None and not _bindable(web_port):
            warn(f"warning: port {web_port} on {HOST} is in use: no dashboard (it takes --port + 4)")
            web_port = None
        if web_port is not None:
            watched = ",".join(str(uri) for uri in uris)
            shown = ("--workflows", str(workflows[0][1].parent)) if workflows else ()
            web = ("web", "--broker", watched, *history[:2], *shown, "--port", str(web_port))
            secret = (("WFM_WEB_TOKEN", token),)
            dashboard = Child("web", (*WFM, *web, *_as(certs, DEPLOYER)), optional=True, environment=secret)
            dashboard = metered(dashboard)
            processes.start(dashboard)
        for child in agent_children(agents, entries, home / "agents", certs, layout.agents):
            processes.start(metered(child))
        for name, file in workflows:
            say(f"deploying {name}")
            _deploy(name, file, (entries[0], *_as(certs, DEPLOYER)), deploy_timeout, processes, stop)
            if stop.is_set():
                return
        spark_uri = None if spark_port is None else f"sc://{HOST}:{spark_port}"
        web_url = None
        if web_port is not None and _serving(dashboard, web_port, processes, stop, warn):
            web_url = f"http://{HOST}:{web_port}/?token={token}"
        names = [name for name, _ in workflows]
        started = (uris, list(agents), processes.logs, names, home / "history", spark_uri, web_url, certs)
        ready(Started(*started, entries[0], metered.urls))
        while not stop.wait(0.2):
            processes.check()
    finally:
        processes.stop()
        lock.close()


def _lock(home: Path) -> TextIO:
    """``home/lock``, locked with this process's pid in it, held until closed: two wfm up in one
    folder would share state and ports in silence."""
    home.mkdir(parents=True, exist_ok=True)
    lock = open(home / "lock", "a+")  # noqa: SIM115 (held beyond this function: serve closes it)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        other = lock.read().strip() or "?"
        lock.close()
        raise UpError(
            f"another wfm up (pid {other}) is running in {home}: stop it, or use another --dir"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _deploy(
    name: str,
    file: Path,
    through: tuple[str, ...],
    timeout: float,
    processes: Processes,
    stop: threading.Event,
) -> None:
    """Run ``wfm deploy --broker THROUGH...`` while watching the children: an agent that dies
    meanwhile (it would never acknowledge) is the error to report, not the deploy's timeout."""
    deploy = subprocess.Popen(
        [*WFM, "deploy", str(file), "--broker", *through],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while deploy.poll() is None:
            processes.check()
            if stop.wait(0.1):
                return
            if time.monotonic() > deadline:
                raise UpError(f"deploying {name} ({file}) took more than {timeout:g} s")
    finally:
        if deploy.poll() is None:
            deploy.kill()
        _, err = deploy.communicate()
    if deploy.returncode != 0:
        for _ in range(10):  # an agent failing at start-up is the better explanation: give it a second
            processes.check()
            time.sleep(0.1)
        reason = (err.strip().splitlines() or [f"exit status {deploy.returncode}"])[-1]
        raise UpError(f"deploying {name} ({file}) failed: {reason}")
