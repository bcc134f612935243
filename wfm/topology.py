"""SESDAD's configuration file (seed 002, section 2), or its TOML equivalent: which sites exist,
how they form a tree, and which broker, publisher, subscriber or agent runs on each.

```
Site site0 Parent none
Site site1 Parent site0
Process broker0 Is broker On site0 URL tcp://127.0.0.1:3333/broker
Process publisher0 Is publisher On site0 URL tcp://127.0.0.1:3334/pub
RoutingPolicy filter          # optional: flooding | filter
Ordering FIFO                 # optional: NO | FIFO | TOTAL
LoggingLevel light            # optional: full | light
```

A site of one broker is that broker. A site of several (three, so that it survives the loss of
any one; five survive two) is **replicated**: its brokers keep one log and serve the site one at
a time (``docs/sites.md``). The links form a tree of sites: every broker of a site dials every
broker of its parent site (of a replicated site only the serving one dials, and only the serving
one answers), and the brokers of a replicated site link to each other. A client (publisher,
subscriber, agent) connects to its site's brokers, first listed first, and fails over along
them. A broker's id is its process name; the URL gives its host and port (port
0: any free port, for ``wfm puppet``, which picks them). The URL of a client is not used (ours
dial out; they serve nothing). Keywords are case-insensitive; ``#`` starts a comment.

The TOML form has the same content: top-level ``routing_policy``, ``ordering``,
``logging_level``; ``[[site]]`` tables with ``name`` and ``parent``; ``[[process]]`` tables with
``name``, ``is``, ``on`` and ``url``. A file whose name ends in ``.toml`` is read as TOML.

Every problem is a :class:`TopologyError`, one line naming the file and line (for TOML, the
table): a topology is read before any process starts, so a mistake costs nothing.
"""

from __future__ import annotations

import re
import socket
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from broker.client.reconnect import BrokerList
from broker.errors import LocalError
from broker.sites.member import SiteConfig
from broker.transport.uri import BrokerURI

__all__ = [
    "ROLES",
    "Process",
    "Site",
    "Topology",
    "TopologyError",
    "free_port",
    "load_topology",
    "parse_toml_topology",
    "parse_topology",
]

ROLES = ("broker", "publisher", "subscriber", "agent")
CHOICES = {
    "routing_policy": ("flooding", "filter"),
    "ordering": ("NO", "FIFO", "TOTAL"),
    "logging_level": ("full", "light"),
}
DEFAULTS = {"routing_policy": "flooding", "ordering": "FIFO", "logging_level": "light"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")  # a broker id must also be a URI path and a client id
URL = re.compile(r"(?:tcp|socket)://(?P<host>[^:/\s]+):(?P<port>\d{1,5})(?:/\S*)?\Z")


def free_port(host: str) -> int:
    """A port free on ``host`` now, for a broker the topology gave port 0."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class TopologyError(LocalError):
    """``FILE:LINE: what is wrong`` (for TOML, ``FILE: site NAME: ...``)."""


@dataclass(frozen=True, slots=True)
class Site:
    name: str
    parent: str | None
    line: int = 0


@dataclass(frozen=True, slots=True)
class Process:
    name: str
    role: str
    site: str
    host: str
    port: int
    line: int = 0


@dataclass(frozen=True, slots=True)
class Topology:
    """A checked topology: the site tree is one tree, every process is on a known site, every
    site with processes has a broker, names and broker addresses are unique."""

    sites: tuple[Site, ...]
    processes: tuple[Process, ...]
    routing_policy: str = DEFAULTS["routing_policy"]
    ordering: str = DEFAULTS["ordering"]
    logging_level: str = DEFAULTS["logging_level"]
    source: str = "<topology>"

    def process(self, name: str) -> Process:
        for process in self.processes:
            if process.name == name:
                return process
        raise TopologyError(f"{self.source}: no process named {name!r}")

    def of_role(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    def brokers_on(self, site: str) -> list[Process]:
        return [p for p in self.processes if p.role == "broker" and p.site == site]

    def uri(self, broker: str) -> BrokerURI:
        process = self.process(broker)
        if process.role != "broker":
            raise TopologyError(f"{self.source}:{process.line}: {broker} is a {process.role}, not a broker")
        return BrokerURI(process.host, process.port, process.name)

    def neighbours(self, broker: str) -> list[BrokerURI]:
        """The brokers of other sites ``broker`` dials: its parent site's."""
        site = self.process(broker).site
        parent = next(s.parent for s in self.sites if s.name == site)
        return [] if parent is None else [self.uri(b.name) for b in self.brokers_on(parent)]

    def site_of(self, broker: str) -> SiteConfig | None:
        """The replicated site ``broker`` is one of the brokers of; None on a site of one."""
        site = self.process(broker).site
        members = self.brokers_on(site)
        if len(members) == 1:
            return None
        return SiteConfig(site, tuple(self.uri(b.name) for b in members))

    def parent_of(self, broker: str) -> str:
        """The name of the router towards the root from ``broker``'s site ("" at the root)."""
        parent = next(s.parent for s in self.sites if s.name == self.process(broker).site)
        if parent is None:
            return ""
        brokers = self.brokers_on(parent)
        return parent if len(brokers) > 1 else brokers[0].name

    def broker_options(self, broker: str) -> tuple[str, ...]:
        """The ``wfm broker`` options, besides its address and the brokers it dials, that place
        ``broker`` as the file says, for processes started with ``--uri`` (``wfm up``, ``wfm
        puppet``): the routing and the ordering (and under TOTAL the parent), its replicated site
        (``--site``, ``--member``) and the sites of the replicated brokers it dials or that dial
        it (``--neighbor-site``: a broker takes a site's name only from those it was told of)."""
        options = [("--routing", self.routing_policy), ("--ordering", self.ordering)]
        if self.ordering == "TOTAL" and self.parent_of(broker):
            options.append(("--parent", self.parent_of(broker)))
        own = self.process(broker).site
        dialling = [self.uri(p.name) for s in self.sites if s.parent == own for p in self.brokers_on(s.name)]
        options += [
            ("--neighbor-site", f"{uri.id}={self.process(uri.id).site}")
            for uri in [*self.neighbours(broker), *dialling]
            if self.site_of(uri.id) is not None
        ]
        site = self.site_of(broker)
        if site is not None:
            options += [("--site", site.name), *(("--member", str(m)) for m in site.others(broker))]
        return tuple(arg for pair in options for arg in pair)

    def routers(self) -> dict[str, tuple[BrokerList, frozenset[str]]]:
        """Every router of the overlay by the name its peers know it by (a replicated site's, or
        its one broker's), with the brokers that serve it and the routers it links with once
        the tree is up: its parent site's and its child sites'."""

        def name(site: str) -> str:
            brokers = self.brokers_on(site)
            return site if len(brokers) > 1 else brokers[0].name

        linked: dict[str, set[str]] = {name(s.name): set() for s in self.sites}
        for site in self.sites:
            if site.parent is not None:
                linked[name(site.name)].add(name(site.parent))
                linked[name(site.parent)].add(name(site.name))
        return {
            name(s.name): (
                BrokerList(self.uri(b.name) for b in self.brokers_on(s.name)),
                frozenset(linked[name(s.name)]),
            )
            for s in self.sites
        }

    def brokers_for(self, client: str) -> BrokerList:
        """The brokers a client of the topology connects to: its site's, first listed first."""
        return BrokerList(self.uri(b.name) for b in self.brokers_on(self.process(client).site))

    def with_ports(self, free_port: Callable[[str], int] = free_port) -> Topology:
        """The same topology with every broker's port 0 replaced by ``free_port(host)``."""
        chosen = tuple(
            replace(p, port=free_port(p.host)) if p.role == "broker" and p.port == 0 else p
            for p in self.processes
        )
        return replace(self, processes=chosen)


def load_topology(path: str | Path) -> Topology:
    """Read and check the topology in ``path`` (TOML if its name ends in ``.toml``)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TopologyError(
            f"cannot read topology {file}: {getattr(error, 'strerror', None) or error}"
        ) from None
    if file.suffix == ".toml":
        return parse_toml_topology(text, str(file))
    return parse_topology(text, str(file))


def parse_topology(text: str, source: str = "<topology>") -> Topology:
    """The SESDAD line format."""
    sites: list[Site] = []
    processes: list[Process] = []
    settings: dict[str, str] = {}
    seen_at: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue

        def fail(message: str, number: int = number) -> TopologyError:
            return TopologyError(f"{source}:{number}: {message}")

        keyword = words[0].lower()
        if keyword == "site":
            if len(words) != 4 or words[2].lower() != "parent":
                raise fail("expected: Site NAME Parent NAME|none")
            parent = None if words[3].lower() == "none" else words[3]
            sites.append(Site(_name(words[1], fail), parent, number))
        elif keyword == "process":
            if len(words) != 8 or [w.lower() for w in words[2:7:2]] != ["is", "on", "url"]:
                raise fail("expected: Process NAME Is broker|publisher|subscriber|agent On SITE URL URL")
            processes.append(_process(words[1], words[3], words[5], words[7], number, fail))
        elif keyword in ("routingpolicy", "ordering", "logginglevel"):
            key = {"routingpolicy": "routing_policy", "logginglevel": "logging_level"}.get(keyword, keyword)
            if len(words) != 2:
                raise fail(f"expected: {words[0]} {'|'.join(CHOICES[key])}")
            if key in seen_at:
                raise fail(f"{words[0]} is given twice (first on line {seen_at[key]})")
            seen_at[key] = number
            settings[key] = _choice(key, words[1], fail)
        else:
            raise fail(
                f"unknown line {words[0]!r} (expected Site, Process, RoutingPolicy, Ordering or LoggingLevel)"
            )
    return _checked(sites, processes, settings, source, lambda line: f"{source}:{line}")


def parse_toml_topology(text: str, source: str = "<topology>") -> Topology:
    """The TOML equivalent: ``[[site]]``, ``[[process]]`` and the three settings."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise TopologyError(f"{source}: {error}") from None
    known = {"site", "process", *CHOICES}
    unknown = sorted(set(data) - known)
    if unknown:
        raise TopologyError(f"{source}: unknown key {unknown[0]!r} (expected {', '.join(sorted(known))})")

    def fail_at(where: str) -> Callable[[str], TopologyError]:
        return lambda message: TopologyError(f"{source}: {where}: {message}")

    settings = {key: _choice(key, str(data[key]), fail_at(key)) for key in CHOICES if key in data}
    sites = []
    for i, table in enumerate(_tables(data, "site", source), 1):
        fail = fail_at(f"site #{i}")
        fields = _fields(table, ("name", "parent"), fail)
        parent = None if fields["parent"].lower() == "none" else fields["parent"]
        sites.append(Site(_name(fields["name"], fail), parent, i))
    processes = []
    for i, table in enumerate(_tables(data, "process", source), 1):
        fail = fail_at(f"process #{i}")
        fields = _fields(table, ("name", "is", "on", "url"), fail)
        processes.append(_process(fields["name"], fields["is"], fields["on"], fields["url"], i, fail))
    return _checked(sites, processes, settings, source, lambda i: f"{source}: entry #{i}")


def _tables(data: Mapping[str, Any], key: str, source: str) -> list[Mapping[str, Any]]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise TopologyError(f"{source}: {key} must be an array of tables ([[{key}]])")
    return tables


def _fields(
    table: Mapping[str, Any], keys: tuple[str, ...], fail: Callable[[str], TopologyError]
) -> dict[str, str]:
    extra = sorted(set(table) - set(keys))
    if extra:
        raise fail(f"unknown key {extra[0]!r} (expected {', '.join(keys)})")
    missing = [k for k in keys if k not in table]
    if missing:
        raise fail(f"missing {missing[0]!r}")
    if not all(isinstance(table[k], str) for k in keys):
        raise fail(f"{', '.join(keys)} must be strings")
    return {k: table[k] for k in keys}


def _name(name: str, fail: Callable[[str], TopologyError]) -> str:
    if not NAME.match(name):
        raise fail(f"bad name {name!r}: a letter or _, then letters, digits, _ or -")
    return name


def _choice(key: str, value: str, fail: Callable[[str], TopologyError]) -> str:
    for choice in CHOICES[key]:
        if value.lower() == choice.lower():
            return choice
    raise fail(f"bad value {value!r} (expected {' or '.join(CHOICES[key])})")


def _process(
    name: str, role: str, site: str, url: str, line: int, fail: Callable[[str], TopologyError]
) -> Process:
    if role.lower() not in ROLES:
        raise fail(f"unknown role {role!r} (expected {', '.join(ROLES)})")
    match = URL.match(url)
    if match is None or int(match["port"]) > 65535:
        raise fail(f"bad URL {url!r} (expected tcp://HOST:PORT/PATH, port 0-65535)")
    return Process(_name(name, fail), role.lower(), site, match["host"], int(match["port"]), line)


def _checked(
    sites: list[Site],
    processes: list[Process],
    settings: dict[str, str],
    source: str,
    where: Callable[[int], str],
) -> Topology:
    names: dict[str, int] = {}
    for site in sites:
        if site.name in names:
            raise TopologyError(f"{where(site.line)}: site {site.name} is defined twice")
        names[site.name] = site.line
    for site in sites:
        if site.parent is not None and site.parent not in names:
            raise TopologyError(f"{where(site.line)}: unknown parent site {site.parent!r}")
    roots = [s for s in sites if s.parent is None]
    if len(roots) != 1:
        what = "no root site (Parent none)" if not roots else f"{len(roots)} root sites, the tree needs one"
        raise TopologyError(f"{source}: {what}")
    parents = {s.name: s.parent for s in sites}
    for site in sites:  # every site must reach the root; a loop never does
        seen: set[str] = set()
        at: str | None = site.name
        while at is not None:
            if at in seen:
                raise TopologyError(f"{where(site.line)}: site {site.name} is in a loop of parents")
            seen.add(at)
            at = parents[at]
    process_at: dict[str, int] = {}
    addresses: dict[tuple[str, int], str] = {}
    for process in processes:
        if process.name in process_at:
            raise TopologyError(
                f"{where(process.line)}: process {process.name} is defined twice "
                f"(first at {where(process_at[process.name])})"
            )
        process_at[process.name] = process.line
        if process.site not in names:
            raise TopologyError(f"{where(process.line)}: unknown site {process.site!r}")
        if process.role == "broker" and process.port:
            address = (process.host, process.port)
            if address in addresses:
                raise TopologyError(
                    f"{where(process.line)}: {process.name} has the address of {addresses[address]}"
                )
            addresses[address] = process.name
    with_brokers = Counter(p.site for p in processes if p.role == "broker")
    for site in sites:
        if site.name not in with_brokers:
            raise TopologyError(f"{where(site.line)}: site {site.name} has no broker")
        if with_brokers[site.name] > 1 and site.name in process_at:  # its brokers go by its name
            raise TopologyError(
                f"{where(site.line)}: site {site.name} has several brokers, so it needs a name no "
                f"process has (process {site.name} is at {where(process_at[site.name])})"
            )
    return Topology(tuple(sites), tuple(processes), **settings, source=source)
