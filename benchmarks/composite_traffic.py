"""Traffic with and without composite subscriptions, in the simulator (the PADRES paper's figures).

The overlay is PADRES's five-broker star (B1 in the centre). Cost is counted as the paper did:
messages times broker-to-broker hops travelled (every message is taken as the same size), except
for the notification figure, which counts the messages a client receives. Each figure is printed
with and without composite subscriptions and their ratio (with / without: lower is better), then
one JSON line with ``notification_ratio``, ``deployment_ratio`` and ``execution_ratio`` (workflow B).

* Notifications: 200 composite subscriptions of 5 atoms (one generation variable, atoms published
  on four different brokers) against the same client's 1,000 atomic subscriptions with the join
  done in the client.
* Deployment: a workflow's plan (``wfm.workflow.translate``) delivered in AGENT_CTL envelopes to
  agents on the four leaf brokers, and what the agents then advertise and subscribe. Without
  composites, each job's condition is deployed as one subscription per atom (variables become
  ``isPresent``) and the agent joins locally. The deployer sends every agent's ADVERTISE envelopes
  before the subscriptions in both cases, so that subscriptions find their advertisements.
* Execution: ten generations of the workflow, every job succeeding: triggers, statuses,
  notifications and the coordinator's generation tracking. Printed twice: with the product's
  tracking (the coordinator subscribes to every status, see docs/workflows.md), and with the
  paper's ("APPL_END is triggered by the end jobs": a composite over the end jobs' statuses, plus
  any FAILURE), which is the fairer comparison of the two (docs/performance.md).
* Growth: deployment plus one generation for layered workflows of 10 to 1,000 jobs; with
  ``--plot FILE`` the curves are drawn (matplotlib, a benchmark-only dependency).

Run: ``python benchmarks/composite_traffic.py [--plot docs/composite_traffic.png]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.language import Filter, Predicate, Publication, Var, parse_composite
from broker.routing.detection import Detector
from broker.sim import Overlay
from broker.sim.overlay import SimClient
from wfm.workflow import After, Envelope, Job, Workflow, encode, translate
from workflow_messages import APPL_END, generation_end, status_subscription, trigger_atom

LEAVES = ["B2", "B3", "B4", "B5"]


def star() -> Overlay:
    overlay = Overlay()
    overlay.add_broker("B1")
    for leaf in LEAVES:
        overlay.add_broker(leaf)
        overlay.connect("B1", leaf)
    return overlay


def ratio(with_: float, without: float) -> float:
    return with_ / without if without else float("nan")


def report(name: str, with_: int, without: int) -> float:
    value = ratio(with_, without)
    print(f"{name:44} with {with_:8d}   without {without:8d}   ratio {value:.3f}   cores {os.cpu_count()}")
    return value


# notifications ---------------------------------------------------------------------------------


def notifications(
    subscriptions: int = 200, atoms: int = 5, rounds: int = 10, seed: int = 1
) -> tuple[int, int]:
    """Messages the subscribing client receives, with composites and with atoms joined locally."""
    received = []
    for composite in (True, False):
        rng = random.Random(seed)
        overlay = star()
        sources = [overlay.add_client(f"p{k}", LEAVES[k % len(LEAVES)]) for k in range(atoms)]
        for k, source in enumerate(sources):
            source.advertise(f"[class,eq,c{k}],[sub,isPresent,0],[g,isPresent,0]")
        client = overlay.add_client("client", "B1")
        for i in range(subscriptions):
            parts = [f"{{[class,eq,c{k}],[sub,=,{i}],[g,=,$I$G]}}" for k in range(atoms)]
            if composite:
                client.subscribe_composite("{" + "&".join(parts) + "}")
            else:
                for k in range(atoms):
                    client.subscribe(f"[class,eq,c{k}],[sub,=,{i}],[g,isPresent,0]")
        for g in range(rounds):
            for i in range(subscriptions):
                for k, source in enumerate(sources):
                    if rng.random() < 0.7:
                        source.publish(f"[class,c{k}],[sub,{i}],[g,{g}]")
        received.append(len(client.notifications) + len(client.deliveries))
    return received[0], received[1]


# workflows ---------------------------------------------------------------------------------------


def workflow_a() -> Workflow:
    """Four jobs: A, then B and C, then D (PAYROLL's shape), on four agents."""
    jobs = [("A", ()), ("B", ("A",)), ("C", ("A",)), ("D", ("B", "C"))]
    return build("WFA", jobs)


def workflow_b() -> Workflow:
    """Eight jobs: two diamonds in a row, with a cross edge, on four agents."""
    jobs = [
        ("J1", ()),
        ("J2", ("J1",)),
        ("J3", ("J1",)),
        ("J4", ("J2", "J3")),
        ("J5", ("J4",)),
        ("J6", ("J4", "J3")),
        ("J7", ("J5", "J6")),
        ("J8", ("J7",)),
    ]
    return build("WFB", jobs)


def layered(size: int, width: int = 4, seed: int = 7) -> Workflow:
    """``size`` jobs in layers of ``width``; each job after one or two jobs of the layer before."""
    rng = random.Random(seed)
    jobs: list[tuple[str, tuple[str, ...]]] = []
    for n in range(size):
        layer = n // width
        before = [f"J{m}" for m in range((layer - 1) * width, layer * width)] if layer else []
        jobs.append((f"J{n}", tuple(rng.sample(before, min(len(before), rng.choice((1, 2)))))))
    return build(f"L{size}", jobs)


def build(name: str, jobs: Iterable[tuple[str, tuple[str, ...]]]) -> Workflow:
    return Workflow(
        name,
        tuple(
            Job(job, f"agent{n % len(LEAVES)}", "true", after=tuple(After(p) for p in after))
            for n, (job, after) in enumerate(jobs)
        ),
    )


@dataclass
class Agent:
    """What an agent does with its envelopes, reduced to the messages it causes."""

    client: SimClient
    composite: bool
    jobs: dict[str, str] = field(default_factory=dict)  # subscription id -> job, with composites
    local: dict[str, tuple[Detector, list[str]]] = field(default_factory=dict)  # job -> join, leaf ids
    coordinator: bool = False
    seen: set[tuple[str, str]] = field(default_factory=set)  # (job, gid) run
    statuses: dict[str, set[str]] = field(default_factory=dict)  # gid -> jobs with a status


def without_variables(atom: Filter) -> Filter:
    return Filter(
        atom.cls,
        tuple(
            Predicate(p.attribute, "isPresent", "") if isinstance(p.value, Var) else p
            for p in atom.predicates
        ),
    )


def deploy(
    overlay: Overlay, workflow: Workflow, composite: bool, by_end_jobs: bool = False
) -> dict[str, Agent]:
    plan = translate(workflow)
    agents: dict[str, Agent] = {}
    for n, name in enumerate(workflow.agents):
        client = overlay.add_client(name, LEAVES[n % len(LEAVES)])
        client.subscribe(f"[class,eq,AGENT_CTL],[agentname,eq,{name}]")
        agents[name] = Agent(client, composite)
    agents[workflow.coordinator].coordinator = not by_end_jobs
    deployer = overlay.add_client("deployer", "B1")
    deployer.advertise(plan.deployer_advertisement())
    issuer = overlay.add_client("issuer", "B1")
    issuer.advertise("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,''],[schedule,isPresent,'']")
    overlay.reset_traffic()
    envelopes = end_job_tracking(workflow, plan.envelopes) if by_end_jobs else list(plan.envelopes)
    envelopes = envelopes if composite else atomic(envelopes, agents)
    advertisements = [e for e in envelopes if e.command == "ADVERTISE"]
    rest = [e for e in envelopes if e.command != "ADVERTISE"]
    for phase in (advertisements, rest):
        for envelope in phase:
            deployer.publish(plan.publication(envelope))
        for agent in agents.values():
            for delivery in agent.client.deliveries:
                install(agent, dict(delivery.publication))
            agent.client.deliveries.clear()
    return agents


def end_job_tracking(workflow: Workflow, envelopes: Iterable[Envelope]) -> list[Envelope]:
    """The coordinator's subscription to every status replaced by the paper's tracking: APPL_END
    fires on a composite over the end jobs' statuses (any status) and the trigger; a FAILURE, which
    can end a generation early, is subscribed to as well (none comes in these runs). Without
    composites, :func:`atomic` turns the composite into atoms that the coordinator joins."""
    name = workflow.name
    every = str(status_subscription(name))
    ends = sorted({j.name for j in workflow.jobs} - {a.job for j in workflow.jobs for a in j.after})
    atoms = [
        f"{{[class,eq,JOBSTATUS],[GID,eq,$S$X],[applname,eq,{name}],[jobname,eq,{end}]}}" for end in ends
    ]
    condition = "{" + "&".join([*atoms, str(trigger_atom(name))]) + "}"
    failures = f"[class,eq,JOBSTATUS],[GID,isPresent,''],[applname,eq,{name}],[status,eq,FAILURE]"
    content = encode({"job": APPL_END, "composite": condition, "clear": str(generation_end(name))})
    out = []
    for envelope in envelopes:
        if envelope.command == "SUBSCRIBE" and envelope.content == every:
            out += [
                Envelope(envelope.agent, "COMPOSITESUBSCRIBE", content, APPL_END),
                Envelope(envelope.agent, "SUBSCRIBE", failures, APPL_END),
            ]
        else:
            out.append(envelope)
    return out


def atomic(envelopes: Iterable[Envelope], agents: dict[str, Agent]) -> list[Envelope]:
    """The plan without composite subscriptions: one SUBSCRIBE envelope per atom of a job's
    condition (its agent joins them), as a translator without composites would deploy it. Their
    command reads ATOM here only so that :func:`install` knows which join they feed."""
    out = []
    for envelope in envelopes:
        if envelope.command != "COMPOSITESUBSCRIBE":
            out.append(envelope)
            continue
        condition = parse_composite(json.loads(envelope.content)["composite"])
        agents[envelope.agent].local[envelope.job] = (Detector(condition), [])
        for atom in condition.atoms():
            out.append(Envelope(envelope.agent, "ATOM", str(without_variables(atom.filter)), envelope.job))
    return out


def install(agent: Agent, envelope: dict[str, object]) -> None:
    command, content, job = envelope["command"], str(envelope["content"]), str(envelope["jobname"])
    if command == "ADVERTISE":
        agent.client.advertise(content)
    elif command == "SUBSCRIBE":
        agent.client.subscribe(content)
    elif command == "ATOM":  # an atom of the job's condition
        agent.local[job][1].append(agent.client.subscribe(content))
    elif command == "COMPOSITESUBSCRIBE":
        data = json.loads(content)
        agent.jobs[agent.client.subscribe_composite(data["composite"], data["clear"])] = job


def execute(overlay: Overlay, workflow: Workflow, agents: dict[str, Agent], generations: int) -> int:
    """Run generations where every job succeeds; returns the link messages it took."""
    overlay.reset_traffic()
    issuer = overlay.clients["issuer"]
    for g in range(generations):
        issuer.publish(f"[class,Trigger],[applname,{workflow.name}],[GID,g{g}],[schedule,'2026.11.23']")
        while step(workflow, agents):
            pass
    return overlay.messages()


def step(workflow: Workflow, agents: dict[str, Agent]) -> bool:
    """Let every agent act on what it received; False when nothing happened."""
    fired: list[tuple[Agent, str, str]] = []
    for agent in agents.values():
        for notification in agent.client.notifications:
            gid = str(notification.publications[0]["GID"])
            fired.append((agent, agent.jobs[notification.subscription], gid))
        agent.client.notifications.clear()
        for delivery in agent.client.deliveries:
            joined = join_locally(agent, delivery.subscriptions, delivery.publication)
            fired += [(agent, job, gid) for job, gid in joined]
            if agent.coordinator and delivery.publication.cls == "JOBSTATUS":
                fired += track(agent, workflow, delivery.publication)
        agent.client.deliveries.clear()
    for agent, job, gid in fired:
        if (job, gid) not in agent.seen:
            agent.seen.add((job, gid))
            agent.client.publish(
                f"[class,JOBSTATUS],[applname,{workflow.name}],[jobname,{job}],[GID,{gid}],[status,SUCCESS],[detail,ok]"
            )
    return bool(fired)


def join_locally(
    agent: Agent, subscriptions: Iterable[str], publication: Publication
) -> list[tuple[str, str]]:
    out = []
    for job, (detector, ids) in agent.local.items():
        for leaf, sub_id in enumerate(ids):
            if sub_id in subscriptions:
                fired = detector.feed(leaf, publication, agent.client.overlay.now)
                out += [(job, str(m.publications[0]["GID"])) for m in fired]
    return out


def track(agent: Agent, workflow: Workflow, publication: Publication) -> list[tuple[Agent, str, str]]:
    """The coordinator ends a generation once every job has a status (all succeed here)."""
    gid = str(publication["GID"])
    done = agent.statuses.setdefault(gid, set())
    done.add(str(publication["jobname"]))
    return [(agent, "APPL_END", gid)] if {j.name for j in workflow.jobs} <= done else []


def traffic(
    workflow: Workflow, composite: bool, generations: int, by_end_jobs: bool = False
) -> tuple[int, int]:
    overlay = star()
    agents = deploy(overlay, workflow, composite, by_end_jobs)
    deployment = overlay.messages()
    return deployment, execute(overlay, workflow, agents, generations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--plot", help="write the growth figure to this PNG file")
    parser.add_argument("--max-jobs", type=int, default=1000, help="largest workflow of the growth figure")
    args = parser.parse_args()
    started = time.perf_counter()
    with_, without = notifications()
    notification_ratio = report("notifications received (200 x 5 atoms)", with_, without)
    results = {}
    for name, workflow in (("A", workflow_a()), ("B", workflow_b())):
        (dep_with, run_with), (dep_without, run_without) = (traffic(workflow, c, 10) for c in (True, False))
        results[name] = (
            report(f"deployment traffic, workflow {name} ({len(workflow.jobs)} jobs)", dep_with, dep_without),
            report(f"execution traffic, workflow {name}, 10 generations", run_with, run_without),
        )
    (_, end_with), (_, end_without) = (traffic(workflow_b(), c, 10, by_end_jobs=True) for c in (True, False))
    end_ratio = report("execution, workflow B, tracked by end jobs", end_with, end_without)
    sizes = [n for n in (10, 20, 50, 100, 200, 500, 1000) if n <= args.max_jobs]
    growth: dict[bool, list[int]] = {True: [], False: []}
    for size in sizes:
        for composite in (True, False):
            deployment, execution = traffic(layered(size), composite, 1)
            growth[composite].append(deployment + execution)
        report(f"deployment + 1 generation, {size} jobs", growth[True][-1], growth[False][-1])
    per_job = [t / n for t, n in zip(growth[True], sizes, strict=True)]
    print(
        f"messages per job with composites, {sizes[0]}..{sizes[-1]} jobs: "
        f"{min(per_job):.1f}..{max(per_job):.1f} (linear growth keeps this flat)"
    )
    if args.plot:
        plot(args.plot, sizes, growth)
    print(f"({time.perf_counter() - started:.0f} s)")
    print(
        json.dumps(
            {
                "notification_ratio": round(notification_ratio, 4),
                "deployment_ratio": round(results["B"][0], 4),
                "execution_ratio": round(results["B"][1], 4),
                "deployment_ratio_a": round(results["A"][0], 4),
                "execution_ratio_a": round(results["A"][1], 4),
                "execution_ratio_end_job_tracking": round(end_ratio, 4),
                "cores": os.cpu_count(),
            }
        )
    )


def plot(path: str, sizes: list[int], growth: dict[bool, list[int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(sizes, growth[False], "o-", label="atomic subscriptions, join at the agent")
    axes.plot(sizes, growth[True], "s-", label="composite subscriptions, distributed detection")
    axes.set_xlabel("jobs in the workflow")
    axes.set_ylabel("messages x hops (deployment + 1 generation)")
    axes.set_title("Traffic against workflow size, five-broker star")
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
