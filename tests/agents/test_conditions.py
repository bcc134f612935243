"""Conditions on other workflows and on events, on the agent's state machine: a run held until
its conditions hold for its generation's date, facts delivered before or after the firing
(history, then live), FACTS envelopes, events used up, cancellation, snapshot and journal."""

from __future__ import annotations

from pathlib import Path

from agents.conditions import HELD, waiting_for
from agents.events import Delivered, Effect, Emit, Finished, Incoming, Result, Run, Start, TimePassed
from agents.forgetting import SWEEP_EVERY
from agents.journal import Journal
from agents.queries import answer_query
from agents.state import Agent
from broker.language import Publication, parse_publication
from tests.signing import DEPLOYER, signed, signed_trigger
from wfm.facts import facts_publications, wanted
from wfm.monitor import Monitor
from wfm.operations import Session
from wfm.web import pages
from wfm.workflow import Job, Workflow, translate
from wfm.workflow.model import Event, Wait
from workflow_messages import job_status
from workflow_messages.conditions import subscription
from workflow_messages.operations import CANCEL, RERUN, decode_content

FILE = "[class,eq,FILE_ARRIVED],[path,eq,'/in/x.csv']"
CLOSE = Wait("LEDGER", "Close")
BILLING = Workflow(
    "BILLING",
    (Job("Invoice", "agentB", "bill", conditions=(CLOSE, Event(FILE))),),
)
PLAN = translate(BILLING)
MONDAY = "2026.11.23"


def installed(workflow: Workflow = BILLING) -> Agent:
    agent = Agent("agentB")
    for envelope in signed(translate(workflow).publications()):
        agent.handle(Incoming(envelope), 0)
    return agent


def key(agent: Agent, job: str, command: str = "COMPOSITESUBSCRIBE") -> str:
    return next(k for k, (_, _, j) in agent.owners.items() if j == job and agent.wanted[k].command == command)


def condition_key(agent: Agent, n: int) -> str:
    return next(k for k in agent.wanted if k.endswith(f"CONDITION Invoice {n}"))


def fire(agent: Agent, gid: str, date: str = MONDAY, now: float = 1.0) -> list[Effect]:
    trigger = signed_trigger("BILLING", gid, date, now)
    start = job_status("BILLING", "APPL_START", gid, "SUCCESS", "", version=PLAN.version, agent="agentB")
    return agent.handle(Delivered(key(agent, "Invoice"), (trigger, start)), now)


def closed(date: str, status: str = "SUCCESS", gid: str = "L1", skipped: bool = False) -> Publication:
    return job_status(
        "LEDGER", "Close", gid, status, "", version="v", agent="agentL", date=date, skipped=skipped
    )


def arrived(path: str = "/in/x.csv", n: int = 1) -> Publication:
    return parse_publication(f"[class,FILE_ARRIVED],[path,'{path}'],[n,{n}]")


def starts(effects: list[Effect]) -> list[Run]:
    return [e.run for e in effects if isinstance(e, Start)]


def test_every_condition_is_a_subscription_of_the_jobs_agent() -> None:
    agent = installed()
    filters = [agent.wanted[condition_key(agent, n)].filter for n in (0, 1)]
    assert [str(f) for f in filters] == [
        "[class,eq,JOBSTATUS],[applname,eq,LEDGER],[date,isPresent,''],[jobname,eq,Close],[status,isPresent,'']",
        str(subscription(Event(FILE))),
    ]


def test_a_run_is_held_until_its_conditions_hold_then_runs_once() -> None:
    agent = installed()
    assert starts(fire(agent, "g1")) == []
    assert agent.generations["BILLING", "g1"].jobs["Invoice"] == HELD
    [held] = agent.held
    assert waiting_for(agent, held) == ["LEDGER.Close", f"event {FILE}"]
    assert starts(agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 2.0)) == []
    assert waiting_for(agent, held) == [f"event {FILE}"]
    [run] = starts(agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 3.0))
    assert (run.job, run.gid, run.date) == ("Invoice", "g1", "2026-11-23")
    assert agent.held == []
    # the same facts again (a reconnection), the firing again: nothing more runs
    assert starts(agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 4.0)) == []
    assert starts(agent.handle(Delivered(condition_key(agent, 1), (arrived(n=2),)), 4.0)) == []
    assert starts(fire(agent, "g1", now=5.0)) == []


def test_facts_delivered_before_the_generation_satisfy_it() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 1.0)
    [run] = starts(fire(agent, "g1", now=2.0))
    assert run.gid == "g1" and agent.held == []


def test_the_status_must_be_for_the_date_the_rule_names_and_one_on_accepts() -> None:
    for rule, on, fact, holds in [
        ("same", "success", closed("2026-11-22"), False),  # another day's
        ("same", "success", closed("2026-11-23", "FAILURE"), False),
        ("same", "success", closed("2026-11-23", "NORUN"), True),
        ("prev", "success", closed("2026-11-22"), True),
        ("-3", "success", closed("2026-11-20"), True),
        ("2026-01-31", "success", closed("2026-01-31"), True),
        ("same", "failure", closed("2026-11-23", "FAILURE"), True),
        ("same", "failure", closed("2026-11-23"), False),
        ("same", "always", closed("2026-11-23", "FAILURE"), True),
        ("same", "always", closed("2026-11-23", "NORUN", skipped=True), False),  # a branch not taken
    ]:
        workflow = Workflow(
            "BILLING", (Job("Invoice", "agentB", "bill", conditions=(Wait("LEDGER", "Close", on, rule),)),)
        )
        agent = installed(workflow)
        agent.handle(Delivered(condition_key(agent, 0), (fact,)), 1.0)
        trigger = signed_trigger("BILLING", "g1", MONDAY, 2.0)
        start = job_status(
            "BILLING", "APPL_START", "g1", "SUCCESS", "", version=workflow.version(), agent="agentB"
        )
        effects = agent.handle(Delivered(key(agent, "Invoice"), (trigger, start)), 2.0)
        assert bool(starts(effects)) == holds, (rule, on, fact)


def test_a_status_without_a_date_satisfies_nothing() -> None:
    agent = installed()
    undated = job_status("LEDGER", "Close", "L1", "SUCCESS", "", version="v", agent="agentL")
    agent.handle(Delivered(condition_key(agent, 0), (undated,)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 1.0)
    assert starts(fire(agent, "g1", now=2.0)) == []


def test_an_event_lets_one_generation_through() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 1.0)
    assert [r.gid for r in starts(fire(agent, "g1", now=2.0))] == ["g1"]
    assert starts(fire(agent, "g2", now=3.0)) == []  # the file was used up by g1
    [run] = starts(agent.handle(Delivered(condition_key(agent, 1), (arrived(n=2),)), 4.0))
    assert run.gid == "g2"


def test_a_status_of_the_job_the_job_waits_for_publishes_its_date() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 1.0)
    [run] = starts(fire(agent, "g1", now=2.0))
    effects = agent.handle(Finished(run, Result(True, "ok", 2.0, 1.0)), 3.0)
    [status] = [e.publication for e in effects if isinstance(e, Emit) and e.publication.cls == "JOBSTATUS"]
    assert status["date"] == "2026-11-23"


def test_a_facts_envelope_hands_the_agent_what_the_history_kept() -> None:
    agent = installed()
    fire(agent, "g1")
    found = {
        subscription(CLOSE): [closed("2026-11-23")],
        subscription(Event(FILE)): [arrived()],
    }
    elsewhere = parse_publication("[class,FILE_ARRIVED],[path,'/in/y.csv']")
    [envelope] = facts_publications(PLAN, wanted(BILLING), found)
    effects = agent.handle(Incoming(DEPLOYER.sign(envelope)), 2.0)
    [run] = starts(effects)
    [ack] = [e.publication for e in effects if isinstance(e, Emit) and e.publication.cls == "AGENT_ACK"]
    assert (ack["result"], ack["detail"]) == ("OK", "2 of 2 facts kept")
    assert run.gid == "g1"
    # the same again (deployed again), and a fact for no condition here: nothing kept
    [again] = facts_publications(
        PLAN,
        {"agentB": [subscription(Event(FILE.replace("x.csv", "y.csv")))]},
        {subscription(Event(FILE.replace("x.csv", "y.csv"))): [elsewhere]},
    )
    [ack] = [e.publication for e in agent.handle(Incoming(DEPLOYER.sign(again)), 3.0) if isinstance(e, Emit)]
    assert (ack["result"], ack["detail"]) == ("UNCHANGED", "0 of 1 facts kept")


def test_an_unsigned_facts_envelope_or_a_bad_one_is_refused() -> None:
    agent = installed()
    [envelope] = facts_publications(PLAN, wanted(BILLING), {subscription(CLOSE): [closed("2026-11-23")]})
    [ack] = [e.publication for e in agent.handle(Incoming(envelope), 1.0) if isinstance(e, Emit)]
    assert ack["result"] == "REFUSED" and agent.facts == {}
    bad = Publication(
        "AGENT_CTL",
        {**{k: v for k, v in envelope.items() if k != "class"}, "content": '{"facts":[["[class,eq","x"]]}'},
    )
    [ack] = [e.publication for e in agent.handle(Incoming(DEPLOYER.sign(bad)), 1.0) if isinstance(e, Emit)]
    assert ack["result"] == "ERROR" and agent.facts == {}


def test_cancelling_the_generation_ends_a_held_run_norun() -> None:
    agent = installed()
    fire(agent, "g1")
    values = {"agentname": "agentB", "command": CANCEL, "content": '{"gid":"g1"}', "applname": "BILLING"}
    cancel = Publication("AGENT_CTL", {**values, "jobname": "*", "version": PLAN.version})
    effects = agent.handle(Incoming(DEPLOYER.sign(cancel)), 2.0)
    statuses = [e.publication for e in effects if isinstance(e, Emit) and e.publication.cls == "JOBSTATUS"]
    assert [(s["jobname"], s["status"]) for s in statuses][:1] == [("Invoice", "NORUN")]
    assert agent.held == []


def test_the_snapshot_keeps_facts_and_held_runs() -> None:
    agent = installed()
    fire(agent, "g1")
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 2.0)
    restored = Agent("agentB")
    restored.restore(agent.snapshot())
    assert restored.snapshot() == agent.snapshot()
    [run] = starts(restored.handle(Delivered(condition_key(restored, 1), (arrived(),)), 3.0))
    assert run.gid == "g1"


def test_a_restarted_agent_replays_its_journal_and_runs_the_released_job_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentB")

    def handle(event: Incoming | Delivered, now: float) -> list[Effect]:
        journal.write(event, now)
        return agent.handle(event, now)

    for envelope in signed(PLAN.publications()):
        handle(Incoming(envelope), 0)
    handle(
        Delivered(key(agent, "Invoice"), (signed_trigger("BILLING", "g1", MONDAY, 1.0), _start("g1"))), 1.0
    )
    handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 2.0)
    [run] = starts(handle(Delivered(condition_key(agent, 1), (arrived(),)), 3.0))
    journal.flush()
    journal.close()
    again = Agent("agentB")
    recovered = Journal(tmp_path)
    recovered.recover(again)
    recovered.close()
    assert again.held == [] and list(again.running.values()) == [run]
    assert again.snapshot() == agent.snapshot()


def _start(gid: str) -> Publication:
    return job_status("BILLING", "APPL_START", gid, "SUCCESS", "", version=PLAN.version, agent="agentB")


def test_wfm_runs_and_the_dashboard_say_what_a_held_job_waits_for() -> None:
    agent = installed()
    fire(agent, "g1")
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 2.0)
    query = {"agentname": "agentB", "request": "r1", "query": "RUNS", "content": '{"workflow":"BILLING"}'}
    answered = answer_query(agent, Publication("AGENT_QUERY", query))
    assert isinstance(answered, Publication)
    [generation] = decode_content(answered["content"])["generations"]
    assert (generation["busy"], generation["waiting"]) == (
        {"Invoice": "held"},
        {"Invoice": [f"event {FILE}"]},
    )
    monitor = Monitor()
    Session(None, None, 1.0)._feed(monitor, "BILLING", "agentB", generation)  # type: ignore[arg-type]
    held = monitor.generations["BILLING", "g1"].jobs["Invoice"]
    assert (held.status, held.detail) == ("HELD", f"waiting for event {FILE}")
    workflows = decode_content(
        answer_query(agent, Publication("AGENT_QUERY", {**query, "query": "WORKFLOWS"}))["content"]  # type: ignore[index]
    )["deployments"]
    [deployment] = workflows
    assert deployment["jobs"]["Invoice"]["conditions"] == [CLOSE.record(), Event(FILE).record()]
    definition = {"jobs": [{"job": "Invoice", "agent": "agentB", "schedule": "daily", "after": [],
                            "conditions": deployment["jobs"]["Invoice"]["conditions"]}]}  # fmt: skip
    picture = pages.workflows(
        [{**definition, "name": "BILLING", "version": "v", "deployed": False, "file": "b"}]
    )
    assert "LEDGER.Close" in picture and "event FILE_ARRIVED" in picture and "other workflow" in picture


def test_a_rerun_may_use_its_original_s_event_again_and_no_other_generation_may() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), 1.0)
    [run] = starts(fire(agent, "g1", now=2.0))
    agent.handle(Finished(run, Result(True, "ok", 2.0, 1.0)), 3.0)
    values = {"agentname": "agentB", "command": RERUN, "applname": "BILLING", "jobname": "*"}
    content = '{"gid":"g1","new":"g1-r1","reuse":[]}'
    rerun = Publication("AGENT_CTL", {**values, "content": content, "version": PLAN.version})
    agent.handle(Incoming(DEPLOYER.sign(rerun)), 4.0)
    assert [r.gid for r in starts(fire(agent, "g1-r1", now=5.0))] == ["g1-r1"]
    assert starts(fire(agent, "g2", now=6.0)) == []


def test_a_held_generation_forgotten_drops_its_held_run() -> None:
    agent = installed()
    fire(agent, "g1")
    agent.handle(TimePassed(), agent.forget_after + 3 * SWEEP_EVERY)
    assert agent.held == [] and ("BILLING", "g1") not in agent.generations
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), agent.forget_after + 200)
    assert (
        starts(agent.handle(Delivered(condition_key(agent, 1), (arrived(),)), agent.forget_after + 201)) == []
    )


def test_undeploying_forgets_the_facts_of_conditions_no_job_has_any_more() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    assert agent.facts
    values = {"agentname": "agentB", "command": "UNDEPLOY", "content": "", "applname": "BILLING"}
    undeploy = Publication("AGENT_CTL", {**values, "jobname": "*", "version": PLAN.version})
    agent.handle(Incoming(DEPLOYER.sign(undeploy)), 2.0)
    assert agent.facts == {} and agent.wanted == {}


def test_a_publication_the_event_filter_does_not_match_satisfies_nothing() -> None:
    agent = installed()
    agent.handle(Delivered(condition_key(agent, 0), (closed("2026-11-23"),)), 1.0)
    agent.handle(Delivered(condition_key(agent, 1), (arrived("/in/y.csv"),)), 1.0)  # a broker's mistake
    assert starts(fire(agent, "g1", now=2.0)) == []
