"""Traffic with and without composite subscriptions, in the simulator (the PADRES paper's figures).

The overlay is PADRES's five-broker star (B1 in the centre). Cost is counted as the paper did:
messages times broker-to-broker hops travelled (every message is taken as the same size), except
for the notification figure, which counts the messages a client receives. Each figure is printed
with and without composite subscriptions and their ratio (with / without: lower is better), then
one JSON line: workflow B's hops (``execution_hops_per_generation_b``, ``deployment_hops_b``), their
lower bounds counted by hand, the same for the atomic baseline, and the ratios.

* Notifications: 200 composite subscriptions of 5 atoms (one generation variable, atoms published
  on four different brokers) against the same client's 1,000 atomic subscriptions with the join
  done in the client.
* Deployment: a workflow's plan (``wfm.workflow.translate``: one DEPLOY envelope per agent)
  delivered to agents on the four leaf brokers, and what the agents then advertise and subscribe
  (``agents.envelope.registrations``, as the real agent derives them). Without composites, each
  job's condition is one subscription per distinct atom of the agent (variables become
  ``isPresent``) and the agent joins locally. Every agent's advertisements are made before the
  subscriptions in both cases, so that subscriptions find their advertisements.
* Execution: ten generations of the workflow, every job succeeding: triggers, statuses,
  notifications, APPL_END (a composite over the end jobs) reaching the brokers that hold join
  state. Both variants run the same plan: every job publishes a status, agents end a generation
  when their own jobs have, the coordinator follows the end jobs only. Not counted in either: the
  acknowledgements, and each agent's own APPL_START subscription (version bookkeeping).
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

from agents.envelope import Registration, parse_control, parse_deploy, registrations
from broker.language import Filter, Predicate, Var
from broker.messages import Deliver
from broker.routing.detection import Detector
from broker.sim import Overlay
from broker.sim.overlay import SimClient
from wfm.workflow import After, Job, Workflow, translate
from workflow_messages import job_status

LEAVES = ["B2", "B3", "B4", "B5"]
# workflow B in the star, every job succeeding, counted by hand in docs/performance.md: each job's
# status crosses its leaf's link once and each job is fired by one message across it (16), and the
# end of the generation reaches the coordinator (1); a deployment pays the flooded advertisements
# (40), an envelope per agent (4) and the subscriptions' least routes (about 17)
EXECUTION_BOUND_B = 17
DEPLOYMENT_BOUND_B = 61


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
    """What an agent does with its DEPLOY envelope, reduced to the messages it causes."""

    client: SimClient
    composite: bool
    jobs: dict[str, str] = field(default_factory=dict)  # subscription id -> job, with composites
    local: dict[str, tuple[Detector, list[str]]] = field(default_factory=dict)  # job -> join, leaf ids
    atoms: dict[str, str] = field(default_factory=dict)  # atom text -> its one subscription id
    seen: set[tuple[str, str]] = field(default_factory=set)  # (job, gid) run


def without_variables(atom: Filter) -> Filter:
    return Filter(
        atom.cls,
        tuple(
            Predicate(p.attribute, "isPresent", "") if isinstance(p.value, Var) else p
            for p in atom.predicates
        ),
    )


def deploy(overlay: Overlay, workflow: Workflow, composite: bool) -> dict[str, Agent]:
    """The plan's DEPLOY envelopes delivered, then each agent's registrations, advertisements of
    every agent first (as if they had settled before the subscriptions were placed)."""
    plan = translate(workflow)
    agents: dict[str, Agent] = {}
    for n, name in enumerate(workflow.agents):
        client = overlay.add_client(name, LEAVES[n % len(LEAVES)])
        client.subscribe(f"[class,eq,AGENT_CTL],[agentname,eq,{name}]")
        agents[name] = Agent(client, composite)
    deployer = overlay.add_client("deployer", "B1")
    deployer.advertise(plan.deployer_advertisement())
    issuer = overlay.add_client("issuer", "B1")
    issuer.advertise("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,''],[schedule,isPresent,'']")
    overlay.reset_traffic()
    for envelope in plan.envelopes:
        deployer.publish(plan.publication(envelope))
    wanted: list[tuple[Agent, str, Registration]] = []
    for agent in agents.values():
        for delivery in agent.client.deliveries:
            control = parse_control(delivery.publication, str(delivery.publication["agentname"]))
            wanted += [
                (agent, info.job, r) for info in parse_deploy(control).jobs for r in registrations(info)
            ]
        agent.client.deliveries.clear()
    for agent, job, registration in sorted(wanted, key=lambda w: w[2].command != "ADVERTISE"):
        install(agent, job, registration)
    return agents


def install(agent: Agent, job: str, registration: Registration) -> None:
    """As the agent does; without composites, one subscription per distinct atom of the agent's
    conditions (variables made ``isPresent``), joined at the agent."""
    if registration.filter is not None:
        agent.client.advertise(registration.filter)
        return
    assert registration.composite is not None
    if agent.composite:
        agent.jobs[agent.client.subscribe_composite(registration.composite, registration.clear)] = job
        return
    ids = []
    for atom in registration.composite.atoms():
        text = str(without_variables(atom.filter))
        if text not in agent.atoms:
            agent.atoms[text] = agent.client.subscribe(text)
        ids.append(agent.atoms[text])
    agent.local[job] = (Detector(registration.composite), ids)


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
            fired += [(agent, job, gid) for job, gid in join_locally(agent, delivery)]
        agent.client.deliveries.clear()
    for agent, job, gid in fired:
        if (job, gid) not in agent.seen:
            agent.seen.add((job, gid))
            agent.client.publish(
                job_status(workflow.name, job, gid, "SUCCESS", "ok", version="v", agent=agent.client.name)
            )
    return bool(fired)


def join_locally(agent: Agent, delivery: Deliver) -> list[tuple[str, str]]:
    out = []
    for job, (detector, ids) in agent.local.items():
        for leaf, sub_id in enumerate(ids):
            if sub_id in delivery.subscriptions:
                fired = detector.feed(leaf, delivery.publication, agent.client.overlay.now)
                out += [(job, str(m.publications[0]["GID"])) for m in fired]
    return out


def traffic(workflow: Workflow, composite: bool, generations: int) -> tuple[int, int]:
    overlay = star()
    agents = deploy(overlay, workflow, composite)
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
        results[name] = (dep_with, run_with, dep_without, run_without)
        report(f"deployment traffic, workflow {name} ({len(workflow.jobs)} jobs)", dep_with, dep_without)
        report(f"execution traffic, workflow {name}, 10 generations", run_with, run_without)
    dep_b, run_b, dep_b_atomic, run_b_atomic = results["B"]
    execution_b = run_b / 10
    print(
        f"workflow B per generation: execution {execution_b:g} hops (lower bound {EXECUTION_BOUND_B}), "
        f"deployment {dep_b} hops (lower bound about {DEPLOYMENT_BOUND_B})"
    )
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
                "execution_hops_per_generation_b": execution_b,
                "execution_lower_bound_b": EXECUTION_BOUND_B,
                "execution_target_b": 19,
                "deployment_hops_b": dep_b,
                "deployment_lower_bound_b": DEPLOYMENT_BOUND_B,
                "deployment_target_b": 70,
                "execution_hops_per_generation_b_atomic": run_b_atomic / 10,
                "deployment_hops_b_atomic": dep_b_atomic,
                "execution_ratio": round(ratio(run_b, run_b_atomic), 4),
                "deployment_ratio": round(ratio(dep_b, dep_b_atomic), 4),
                "execution_ratio_a": round(ratio(results["A"][1], results["A"][3]), 4),
                "deployment_ratio_a": round(ratio(results["A"][0], results["A"][2]), 4),
                "notification_ratio": round(notification_ratio, 4),
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
