"""``wfm broker``, ``wfm status`` and ``wfm client``: thin commands over broker.transport/client."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from broker.client import Brokers, Client, Delivery, RefusedError
from broker.durable import LogInUse
from broker.errors import LinkClosed
from broker.language import ParseError
from broker.messages.ids import PEER_ID
from broker.routing.forwarding import COVERING_MODES, ROUTING_MODES
from broker.routing.router import ORDERINGS
from broker.sites.member import SiteConfig
from broker.transport.persistence import CHECKPOINT_RECORDS, Fsync
from broker.transport.server import RouterService
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from wfm.cli.options import URI, acl_option, broker_option, metrics_option, output_option, tls_options
from wfm.cli.serving import Running, exposed, serve
from wfm.client_commands import Console, apply_line
from wfm.metrics import Address
from wfm.security.acl import load_policy
from wfm.topology import load_topology


@click.command()
@click.option("--uri", type=URI, default=None, help="This broker's address, socket://HOST:PORT/ID.")
@click.option("--neighbor", "neighbors", type=URI, multiple=True, help="A neighbour to link to (repeatable).")
@click.option(
    "--topology",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="A SESDAD configuration file (or its TOML form, docs/puppet.md): with --name, this "
    "broker's address and the neighbours it dials come from it, in place of --uri.",
)
@click.option("--name", default=None, help="With --topology: the process name of this broker in it.")
@click.option(
    "--site",
    default=None,
    help="The replicated site this broker is one of (with --member for each other broker of it; "
    "from --topology, a site with several brokers): they keep one log and serve the site one at "
    "a time, so it survives the loss of any one (docs/sites.md).",
)
@click.option("--member", "members", type=URI, multiple=True, help="Another broker of --site (repeatable).")
@click.option(
    "--neighbor-site",
    "neighbor_sites",
    metavar="ID=SITE",
    multiple=True,
    callback=lambda _ctx, _param, values: _sites_of(values),
    help="The --neighbor ID is one of the brokers of replicated site SITE (repeatable; from "
    "--topology, known): this broker links to whichever of them serves SITE.",
)
@click.option(
    "--election-timeout",
    type=click.FloatRange(0.05, 60),
    default=0.5,
    show_default=True,
    help="With a site: seconds without its leader after which its other brokers elect another.",
)
@click.option(
    "--covering",
    type=click.Choice(COVERING_MODES),
    default="off",
    show_default=True,
    help="Subscription covering.",
)
@click.option("--advertisement-covering/--no-advertisement-covering", default=False, show_default=True)
@click.option(
    "--routing",
    type=click.Choice(ROUTING_MODES),
    default=None,
    help="SESDAD's RoutingPolicy: filter sends a publication towards the subscriptions it matches, "
    "flooding to every broker; every broker of an overlay must route alike [default: the "
    "topology's RoutingPolicy with --topology, else filter].",
)
@click.option(
    "--ordering",
    type=click.Choice(ORDERINGS),
    default=None,
    help="SESDAD's Ordering, for the whole overlay: FIFO keeps each publisher's order at every "
    "subscriber (NO promises nothing more, and gets the same); TOTAL gives every subscriber one "
    "order, the root's, through which every publication then passes (give --parent) [default: the "
    "topology's Ordering with --topology, else FIFO].",
)
@click.option(
    "--parent",
    default="",
    help="With --ordering TOTAL: the neighbour towards the root (its id, or its replicated site's "
    "name); none at the root [default: from --topology].",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between pings on an idle link; silent for 4 of them, it is dropped.",
)
@click.option(
    "--composite-max-waiting",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="Partial matches one composite detection keeps; beyond it the oldest is dropped "
    "(counted in status as composite_dropped).",
)
@click.option(
    "--composite-max-age",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Seconds a partial match may wait for its partners [default: no limit].",
)
@click.option(
    "--session-grace",
    type=click.FloatRange(0),
    default=600.0,
    show_default=True,
    help="Seconds a disconnected client's or neighbour's subscriptions, advertisements and join "
    "state are kept, and what is for it is held, waiting for it to reconnect; 0: withdrawn at once.",
)
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of this broker's write-ahead log: restarted with the same one (killed -9 "
    "too), it comes back with its tables, sessions, join state and everything in its custody; "
    "one broker per directory [default: ./.wfm/brokers/ID, as wfm up lays out its brokers].",
)
@click.option(
    "--memory",
    is_flag=True,
    help="Keep the broker's state in memory only, not with --data: killed, it loses its tables, "
    "sessions and everything it held for its peers.",
)
@click.option(
    "--fsync",
    type=click.Choice(["group", "each", "off"]),
    default="group",
    show_default=True,
    help="One fsync per group of messages, one per message, or none (survives the process dying, "
    "not the machine); not with --memory.",
)
@click.option(
    "--checkpoint-every",
    type=click.IntRange(1),
    default=CHECKPOINT_RECORDS,
    show_default=True,
    help="Inputs between two snapshots of the broker's state; fewer make a restart replay less, "
    "and cost a snapshot's write more often; not with --memory.",
)
@click.option(
    "--trace-forwarding",
    "trace",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Append a JSON line to this file for each publication the broker sends on to another "
    "broker or delivers to a client (when, to whom, its id and content): what SESDAD's "
    "BroEvent logs (wfm puppet at LoggingLevel full). Off by default: it costs a write each.",
)
@acl_option
@tls_options
@click.option(
    "--insecure",
    is_flag=True,
    help="Without --tls, listen on an address other hosts can reach anyway: anyone who reaches "
    "it can join the overlay as a client or a broker.",
)
@metrics_option
def broker(
    uri: BrokerURI | None,
    neighbors: tuple[BrokerURI, ...],
    topology: Path | None,
    name: str | None,
    site: str | None,
    members: tuple[BrokerURI, ...],
    neighbor_sites: dict[str, str],
    election_timeout: float,
    covering: str,
    advertisement_covering: bool,
    routing: str | None,
    ordering: str | None,
    parent: str,
    heartbeat: float,
    composite_max_waiting: int,
    composite_max_age: float | None,
    session_grace: float,
    data: Path | None,
    memory: bool,
    fsync: Fsync,
    checkpoint_every: int,
    trace: Path | None,
    acl: Path | None,
    tls: Identity | None,
    insecure: bool,
    metrics: Address | None,
) -> None:
    """Run a broker until SIGINT or SIGTERM. Its state (tables, sessions, custody) is on disk, in
    ./.wfm/brokers/ID unless --data says where, so a broker killed and started again loses
    nothing it acknowledged; --memory keeps it in memory only. With --tls and --identity (a broker
    certificate whose name is the URI's ID) every link is mutual TLS; without, it listens on
    loopback only."""
    placed = _placed(uri, neighbors, topology, name, routing, ordering, parent)
    uri, neighbors, replicated = placed.uri, placed.neighbors, placed.site
    neighbor_sites = {**placed.neighbor_sites, **neighbor_sites}
    if site is not None or members:
        if replicated is not None or site is None or not members:
            raise click.UsageError("--site and --member go together, and not with --topology (it says)")
        replicated = SiteConfig(site, (uri, *members))
    if replicated is not None:
        replicated = replace(
            replicated, election_timeout=election_timeout, heartbeat=min(heartbeat, election_timeout) / 5
        )
        if memory:
            raise click.UsageError(
                f"a broker of site {replicated.name} must keep its log on disk: a broker that "
                "forgot its vote could let two brokers lead the site at once (drop --memory)"
            )
    data = _data_directory(uri, data, memory)
    _log_with_prefix(uri.id)
    try:
        node = RouterService(
            uri,
            neighbors,
            covering,
            advertisement_covering,
            heartbeat,
            dead_after=4 * heartbeat,
            composite_max_waiting=composite_max_waiting,
            composite_max_age=composite_max_age,
            session_grace=session_grace,
            data=data,
            fsync=fsync,
            checkpoint_every=checkpoint_every,
            policy=load_policy(acl),
            tls=tls,
            insecure=insecure,
            site=replicated,
            neighbor_sites=neighbor_sites,
            routing=placed.routing,
            ordering=placed.ordering,
            parent=placed.parent,
            trace=trace,
        )
    except LogInUse as error:
        raise click.ClickException(
            f"{error}: broker {uri.id} runs with it already; give this one a --data DIR of its own, "
            "or --memory"
        ) from None
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        if trace is None or error.filename not in (str(trace), str(trace.parent)):
            raise
        raise click.ClickException(f"cannot open --trace-forwarding {trace}: {error.strerror}") from None
    # Messages make short-lived objects by the thousand a second, nearly all freed by their
    # count; the default threshold (700) would run the cycle collector every few dozen
    # publications over the tables (docs/performance.md, Overlay).
    gc.set_threshold(50_000, 20, 100)
    served = None
    if metrics is not None:
        from wfm.metrics.families import broker_metrics

        served = exposed(metrics, broker_metrics(node))
    try:
        serve(Running(node, logging.getLogger("broker")), served)
    except OSError as error:
        reason = os.strerror(error.errno).lower() if error.errno else str(error)
        raise click.ClickException(f"cannot listen on {uri}: {reason}") from None


def _data_directory(uri: BrokerURI, data: Path | None, memory: bool) -> Path | None:
    """Where the broker keeps its write-ahead log: ``--data``, else ``./.wfm/brokers/ID`` (where
    an agent's default ``./.wfm/agents/NAME`` and ``wfm up``'s ``.wfm/brokers/ID`` are), or
    nowhere with ``--memory``."""
    if memory:
        if data is not None:
            raise click.UsageError("--memory and --data exclude each other: give one")
        return None
    if data is not None:
        return data.absolute()
    if uri.id in (".", ".."):
        raise click.UsageError(f"a broker named {uri.id!r} needs --data DIR (or --memory)")
    return Path(".wfm", "brokers", uri.id).absolute()


def _sites_of(values: tuple[str, ...]) -> dict[str, str]:
    """``--neighbor-site ID=SITE`` values, checked."""
    sites: dict[str, str] = {}
    for value in values:
        broker, equals, site = value.partition("=")
        if not equals or not PEER_ID.match(broker) or not PEER_ID.match(site):
            raise click.BadParameter(f"{value!r} is not ID=SITE (a broker's id, its site's name)")
        sites[broker] = site
    return sites


@dataclass(frozen=True)
class _Placement:
    """Where a broker stands in the overlay, and how the overlay routes and orders."""

    uri: BrokerURI
    neighbors: tuple[BrokerURI, ...]
    routing: str
    site: SiteConfig | None = None
    neighbor_sites: dict[str, str] = field(default_factory=dict)  # broker id -> its replicated site
    ordering: str = "FIFO"
    parent: str = ""


def _placed(
    uri: BrokerURI | None,
    neighbors: tuple[BrokerURI, ...],
    topology: Path | None,
    name: str | None,
    routing: str | None,
    ordering: str | None,
    parent: str,
) -> _Placement:
    """This broker's address, neighbours, routing mode, replicated site, the sites of the
    neighbours that are brokers of one, the ordering and the parent: from --uri (and --routing,
    --ordering, --parent), or from --topology and --name (its RoutingPolicy and Ordering, which
    the options must agree with)."""
    if (topology is None) != (name is None):
        raise click.UsageError("--topology and --name go together")
    if (uri is None) == (topology is None):
        raise click.UsageError("give --uri, or --topology FILE --name NAME (not both)")
    if uri is not None:
        return _Placement(uri, neighbors, routing or "filter", ordering=ordering or "FIFO", parent=parent)
    assert topology is not None and name is not None
    placed = load_topology(topology)
    here, dials, site = placed.uri(name), tuple(placed.neighbours(name)), placed.site_of(name)
    if any(broker.port == 0 for broker in (here, *dials, *(site.members if site else ()))):
        raise click.UsageError(
            f"{topology}: {name}, its site's brokers and the brokers it dials need fixed ports "
            "(port 0 is for wfm up)"
        )
    if routing not in (None, placed.routing_policy):
        raise click.UsageError(f"{topology} says RoutingPolicy {placed.routing_policy}, not {routing}")
    if ordering not in (None, placed.ordering) or parent not in ("", placed.parent_of(name)):
        raise click.UsageError(f"{topology} says Ordering {placed.ordering} and where the root is")
    sites = {d.id: placed.process(d.id).site for d in dials if placed.site_of(d.id) is not None}
    return _Placement(
        here,
        (*dials, *neighbors),
        placed.routing_policy,
        site,
        sites,
        placed.ordering,
        placed.parent_of(name),
    )


def _log_with_prefix(name: str) -> None:
    root = logging.getLogger()
    for handler in root.handlers:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s"))
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


STATUS_KEYS = (
    "id",
    "uri",
    "neighbors",
    "clients",
    "subscriptions",
    "advertisements",
    "covering",
    "routing",
    "composite_subscriptions",
    "composite_detected",
    "composite_waiting",
    "composite_dropped",
    "sessions_waiting",
)
DROP_COUNTERS = ("slow_consumers", "router_errors")  # counters of lost messages, besides dropped.*


@click.command()
@broker_option
@output_option
def status(broker_uri: Brokers, output: str) -> None:
    """Show a broker's id, neighbours and table sizes."""
    report = asyncio.run(_status(broker_uri))
    if output == "json":
        click.echo(json.dumps(report))
        return
    for key in STATUS_KEYS:
        value = report.get(key)
        click.echo(f"{key:24} {', '.join(value) if isinstance(value, list) else value}")
    counters = report.get("counters", {})
    drops = {k: v for k, v in counters.items() if v and ("dropped" in k or k.endswith(DROP_COUNTERS))}
    click.echo(f"{'dropped':24} {', '.join(f'{k}={v}' for k, v in drops.items()) or 'none'}")


async def _status(uri: Brokers) -> dict[str, Any]:
    client = await Client.connect(uri)
    async with client:
        return await client.status()


@click.command()
@broker_option
@click.option("--id", "client_id", help="Client id (unique at its broker; default: random).")
@click.option(
    "--linger",
    type=click.FloatRange(0),
    default=0.5,
    show_default=True,
    help="Seconds to keep receiving after the end of input.",
)
@output_option
def client(broker_uri: Brokers, client_id: str | None, linger: float, output: str) -> None:
    """Apply commands read from stdin, one a line, and print every delivery.

    \b
    a  FILTER        advertise            (prints "adv ID" on stderr)
    s  FILTER        subscribe            (prints "sub ID" on stderr)
    cs [POLICY] COMPOSITE  composite subscribe (prints "sub ID" on stderr); POLICY:
                     chronicle (default), recent, continuous, cumulative,
                     unrestricted or padres
    p  PUBLICATION [priority=0..9] [ttl=DURATION] [id=ID] [ack=receipt|client]
       [retain [cancel=any]] [persistent=false]
                     publish: a priority (4 by default; higher ones
                     overtake lower ones waiting anywhere), a time to live
                     (30s, 5m, 2h: never delivered after it), an id of
                     your own, shown to subscribers (published again, it
                     is not routed again), an ack asked of them
                     (printed on stderr as it comes: "receipt ID by
                     CLIENT"); retain: kept and sent to subscriptions made
                     later until it expires or is cancelled (by its
                     publisher, or with cancel=any by anyone);
                     persistent=false: at most once, never logged or kept
    cancel ID        cancel a retained publication (its id=, or its
                     publication id)
    ack ID           acknowledge a delivery that asked for ack=client (ID:
                     its publisher's id for it, or its publication id)
    pull N           pull: N more deliveries, then none until the next
                     pull (the broker keeps the rest for this client)
    push             be pushed every delivery again (the default)
    ua ID            unadvertise
    us ID            unsubscribe
    sleep SECONDS    wait, deliveries keep arriving

    Each line is applied at the broker before the next is read. A bad line prints an error on
    stderr and the client goes on; the exit status is 1 if any line failed.
    """
    failures = asyncio.run(_client(broker_uri, client_id, linger, output == "json"))
    if failures:
        sys.exit(1)


async def _client(uri: Brokers, client_id: str | None, linger: float, as_json: bool) -> int:
    session = await Client.connect(uri, client_id)
    console = Console(lambda text: click.echo(text, err=True))
    printer = asyncio.get_running_loop().create_task(_print_deliveries(session, console, as_json))
    failures = 0
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                said = await apply_line(session, line.strip(), console)
            except (ParseError, RefusedError, ValueError) as error:
                failures += 1
                click.echo(f"wfm: error: {line.strip()[:80]}: {error}", err=True)
                continue
            except LinkClosed as error:
                raise click.ClickException(f"connection to {uri} lost: {error}") from None
            if said is not None:
                click.echo(said, err=True)
        await asyncio.sleep(linger)
    finally:
        for task in console.tasks:  # acks still awaited when the input and the linger ended
            task.cancel()
        await session.close()
        await asyncio.gather(printer, *console.tasks, return_exceptions=True)
    return failures


async def _print_deliveries(session: Client, console: Console, as_json: bool) -> None:
    async for delivery in session:
        console.delivered(delivery)
        click.echo(_format(delivery, as_json))
        sys.stdout.flush()


def _format(delivery: Delivery, as_json: bool) -> str:
    if not as_json:
        texts = [str(p) for p in delivery.publications or (delivery.publication,)]
        return f"{delivery.subscription} {' | '.join(texts)}"
    if delivery.publications:
        each = [{"publication": str(p), "attributes": dict(p)} for p in delivery.publications]
        return json.dumps({"subscription": delivery.subscription, "publications": each}, ensure_ascii=False)
    qos = delivery.qos
    return json.dumps(
        {
            "subscription": delivery.subscription,
            "publication": str(delivery.publication),
            "attributes": dict(delivery.publication),
            "priority": qos.priority,
            **({"id": qos.mid} if qos.mid else {}),
            **({"expires": qos.expires} if qos.expires is not None else {}),
            **({"ack": qos.ack, "publication_id": delivery.id} if qos.ack != "none" else {}),
        },
        ensure_ascii=False,
    )
