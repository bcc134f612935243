"""The dashboard's HTML: pure functions from the data of ``sources.py`` and the monitor's model to
text. Every value shown is escaped; nothing here does I/O.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from html import escape
from typing import Any

from wfm.monitor import Generation, Monitor
from wfm.operations import generation_record, taken_over
from wfm.triggers import check_workflow, parse_date
from wfm.web import holding
from wfm.web.svg import Bar, Edge, Node, Series, dag_svg, gantt_svg, graph_svg, line_chart_svg
from workflow_messages import APPL_END, APPL_START, EXPIRED
from workflow_messages.calendars import DAYS
from workflow_messages.conditions import label
from workflow_messages.overlap import SKIPPED

__all__ = [
    "PAGES",
    "HistoryQuery",
    "Live",
    "RunsQuery",
    "broker_detail",
    "generations",
    "history",
    "job_log",
    "overlay",
    "problem",
    "run",
    "runs",
    "shell",
    "workflows",
]

PAGES = ("overlay", "workflows", "runs", "alerts", "history")
# page -> the event that redraws it
EVENTS = {"overlay": "overlay", "runs": "runs", "workflows": "workflows", "alerts": "alerts"}
RUNS_SHOWN = 20  # newest generations on the Runs page
PERIODS = ("day", "week")  # as wfm report --by (wfm.history.report loads Spark: not imported here)
VIRTUAL = (APPL_START, APPL_END)
# what the agents say of a job not ended (their answer to RUNS, as wfm runs shows it): they publish a
# job's status only at its end, so these come from asking them (``Dashboard.ask_running``)
QUEUED, RUNNING, WAITING = "QUEUED", "RUNNING", "WAITING"  # WAITING: for its next attempt
# a generation nobody started: a Trigger seen, but no status (no APPL_START: no coordinator has
# its workflow, or it was triggered a moment ago); "starting" for NOT_STARTED_AFTER seconds
STARTING, NOT_STARTED = "starting", "not started"
# a generation its coordinator holds waiting its turn: its workflow's max-active generations run
WAITING_TURN = "queued"
NOT_STARTED_AFTER = 30.0


@dataclass(frozen=True)
class Live:
    """What the Runs page shows beyond the monitor's statuses: the time ``now`` (epoch seconds),
    the attempt of each running job and when that attempt started, as its agent recorded it
    ((workflow, gid, job) -> (attempt, epoch seconds or None)), and when the dashboard first saw
    each generation ((workflow, gid) -> epoch seconds)."""

    now: float = 0.0
    attempts: Mapping[tuple[str, str, str], tuple[int, float | None]] = field(default_factory=dict)
    seen: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def outcome(self, generation: Generation) -> str:
        """APPL_END's status; else ``running`` once any status came (APPL_START, or a job's from
        the agents' answers); else ``starting``, then ``not started`` NOT_STARTED_AFTER seconds
        after the dashboard first saw it."""
        if generation.end is not None:
            return generation.end.status
        start = generation.jobs.get(APPL_START)
        if start is not None and start.status == QUEUED:  # its coordinator holds it (max-active)
            return WAITING_TURN
        if generation.jobs:
            return "running"
        seen = self.seen.get((generation.workflow, generation.gid), self.now)
        return STARTING if self.now - seen < NOT_STARTED_AFTER else NOT_STARTED


def shell(name: str, definitions: Sequence[Mapping[str, Any]]) -> str:
    """A whole page: navigation, the page's controls, and the fragment the script fills in."""
    nav = "".join(
        f'<a href="/{p}" class="{"active" if p == name else ""}">{p.capitalize()}</a>' for p in PAGES
    )
    controls = ""
    if name == "runs":
        names = [d["name"] for d in definitions if "name" in d]
        options = "".join(f'<option value="{_a(n)}">{escape(n)}</option>' for n in names)
        controls = (
            '<form id="trigger-form" class="controls"><label>Workflow '
            f'<select name="workflow" id="trigger-workflow">{options}</select></label>'
            ' <button type="submit" id="trigger">Trigger</button> <span id="trigger-result"></span>'
            ' <span id="action-result"></span></form>'
            '<form id="runs-filter" class="controls"><label>Workflow <select name="workflow">'
            f'<option value="">all</option>{options}</select></label> <label>Status <select name="status">'
            '<option value="">all</option>'
            + "".join(f'<option value="{_a(o)}">{escape(o)}</option>' for o in OUTCOMES)
            + '</select></label> <label>From <input type="date" name="since"></label> '
            '<label>To <input type="date" name="until"></label> <button type="submit">Filter</button></form>'
        )
    elif name == "history":
        today = date.today()
        controls = (
            '<form id="history-form" class="controls">'
            f'<label>From <input type="date" name="since" value="{today - timedelta(days=30)}"></label> '
            f'<label>To <input type="date" name="until" value="{today}"></label> '
            '<label>By <select name="by"><option>day</option><option>week</option></select></label> '
            '<label>Workflow <input name="workflow" placeholder="all"></label> '
            '<button type="submit">Show</button></form>'
        )
    elif name == "alerts":
        controls = '<p class="controls"><span id="action-result"></span></p>'
    detail = '<div id="detail"></div>' if name in ("overlay", "runs") else ""
    if name == "runs":
        detail = '<div id="run"></div>' + detail
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>wfm {escape(name)}</title>"
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/static/dashboard.css"></head><body>'
        f'<header><span class="brand">wfm</span><nav>{nav}</nav><span id="live"></span></header>'
        f"<main>{controls}"
        f'<div id="content" data-fragment="/fragment/{_a(name)}" data-events="{_a(EVENTS.get(name, ""))}">'
        f"loading ...</div>{detail}</main>"
        '<script src="/static/dashboard.js"></script></body></html>'
    )


def problem(message: str) -> str:
    return f'<p class="problem">{escape(message)}</p>'


# overlay ----------------------------------------------------------------------------------------

COUNTS = ("clients", "subscriptions", "advertisements", "composites", "covering")
COUNTERS = ("publications", "deliveries", "drops", "refusals")
# what each counter of a broker's refusals and drops means (docs/security.md, docs/reliability.md)
MEANINGS = {
    "refused": "requests refused with a Refuse message to the client, for any of the reasons below",
    "refused.acl": "a client's request its role may not make (access control at the edge broker)",
    "refused.nonconforming": "a client's publication that fits none of its own advertisements",
    "dropped.nonconforming": "a publication from a neighbour that fits no advertisement from its side",
    "dropped.duplicate": "a copy already routed (a client's resend, or a cycle in the overlay)",
    "dropped.unexpected": "a message that made no sense here (a part withdrawn under way, a Refuse)",
    "dropped.ttl": "a message whose time to live ran out",
    "dropped.resent": "a neighbour's resend of a message already handled",
    "dropped.link_down": "messages for a link that went down before they were confirmed",
    "dropped.link_closed": "messages held for a neighbour that left for good",
    "dropped.link_full": "messages for a neighbour whose custody channel was full",
    "dropped.session_full": "deliveries for a client whose session queue was full",
    "unconfirmed.session_closed": "deliveries a client had received but not confirmed when its session ended",
    "link.dropped.unsent": "messages a link could not send before it closed",
    "link.dropped.unsendable": "messages too large, or otherwise impossible, to send on a link",
    "link.dropped.link_gone": "messages for a link that had gone",
}


def overlay(view: Mapping[str, Any]) -> str:
    """The graph of brokers, links and the clients hanging off each broker (from its tables), a
    table of each broker's counts, counters and rates (per second, since the last walk), and
    what each refusal and drop counter means, with each broker's count."""
    brokers = view.get("brokers", [])
    if not brokers:
        return problem(view.get("error", "no broker answered yet ..."))
    graph = graph_svg(
        [(b["id"], "reached" if b["reached"] else "unreached") for b in brokers],
        [(a, b) for a, b in view.get("links", [])],
        hosted={b["id"]: b.get("hosted") or [] for b in brokers if b["reached"]},
        notes={b["id"]: _rates(b.get("rates") or {}) for b in brokers if b["reached"]},
        link_rates={(a, b): (ab, ba) for a, b, ab, ba in view.get("link_rates") or ()},
    )
    head = "".join(
        f"<th>{h}</th>" for h in ("broker", "uri", "clients here", *COUNTS, *COUNTERS, "in/s", "delivered/s")
    )
    rows = []
    for b in brokers:
        if not b["reached"]:
            rows.append(
                f'<tr data-broker-row="{_a(b["id"])}"><td>{escape(b["id"])}</td>'
                f'<td colspan="{4 + len(COUNTS) + len(COUNTERS)}" class="problem">'
                f"{escape(b['error'])}</td></tr>"
            )
            continue
        cells = "".join(f"<td>{escape(str(b[k]))}</td>" for k in (*COUNTS, *COUNTERS))
        here = "withheld" if b.get("hosted") is None else ", ".join(b["hosted"]) or "none"
        rate = b.get("rates") or {}
        speeds = "".join(
            f'<td class="number">{rate[k]:g}</td>' if k in rate else "<td></td>"
            for k in ("publications", "deliveries")
        )
        rows.append(
            f'<tr data-broker-row="{_a(b["id"])}"><td><a href="#" data-broker="{_a(b["id"])}">'
            f"{escape(b['id'])}</a></td><td>{escape(b['uri'])}</td><td>{escape(here)}</td>{cells}{speeds}</tr>"
        )
    reached = [b for b in brokers if b["reached"]]
    seen = sorted(
        {k for b in reached for k in b.get("problems") or {}}
        | {"refused", "refused.acl", "dropped.nonconforming"}
    )
    legend = "".join(
        f'<tr data-counter="{_a(k)}"><td><code>{escape(k)}</code></td><td>{escape(MEANINGS.get(k, ""))}</td>'
        + "".join(f'<td class="number">{(b.get("problems") or {}).get(k, 0)}</td>' for b in reached)
        + "</tr>"
        for k in seen
    )
    ids = "".join(f"<th>{escape(b['id'])}</th>" for b in reached)
    return (
        f"<p>{len(brokers)} brokers, {len(view.get('links', []))} links; the clients hanging off each"
        " broker (those with a subscription or an advertisement in its first 300 table entries); rates"
        " per second since the last walk (2 s). Click a broker for its tables.</p>"
        f'{graph}<table class="grid"><tr>{head}</tr>{"".join(rows)}</table>'
        "<h3>Refusals and drops: what each counter means</h3>"
        f'<table class="grid counters"><tr><th>counter</th><th>counts</th>{ids}</tr>{legend}</table>'
    )


def _rates(rates: Mapping[str, float]) -> str:
    if not rates:
        return ""
    return f"{rates.get('publications', 0):g} in/s · {rates.get('deliveries', 0):g} out/s"


def broker_detail(status: Mapping[str, Any]) -> str:
    """One broker's SRT, PRT and composite detections (as many as the broker sent, and the total)."""
    sections = [
        f'<h2 data-detail="{_a(str(status.get("id", "")))}">Broker {escape(str(status.get("id", "")))}</h2>'
    ]
    for key, title, columns in (
        ("srt", "Advertisements (SRT)", ("id", "filter", "hop")),
        ("prt", "Subscriptions (PRT)", ("id", "filter", "hop")),
        ("composites", "Composite detections", ("id", "composite", "detected_here", "waiting", "requesters")),
    ):
        table = status.get(key) or {"entries": [], "total": 0}
        entries = table["entries"]
        shown = (
            f"{len(entries)} of {table['total']}" if len(entries) < table["total"] else str(table["total"])
        )
        head = "".join(f"<th>{c}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(str(e.get(c, '')))}</td>" for c in columns) + "</tr>"
            for e in entries
        )
        sections.append(f'<h3>{title}: {shown}</h3><table class="grid {key}"><tr>{head}</tr>{body}</table>')
    return "".join(sections)


# workflows --------------------------------------------------------------------------------------


def alerts(records: Sequence[Mapping[str, Any]], error: str | None = None) -> str:
    """The alerts of failed jobs not acknowledged yet, the newest first, each with its button and
    its quality of service: priority, when it expires (if it does) and its publication id (the
    id cell's title, beside the id the alert is named by)."""
    parts = [problem(error)] if error else []
    if not records:
        return "".join(parts) + "<p>no alert waits for an acknowledgement</p>"
    now = time.time()
    rows = "".join(
        f'<tr class="alert" data-alert="{_a(str(r["id"]))}">'
        f'<td title="publication {_a(str(r["publication_id"]))}">{escape(str(r["id"]))}</td>'
        f"<td>{escape(str(r['workflow']))}</td><td>{escape(str(r['job']))}</td>"
        f"<td>{escape(str(r['gid']))}</td><td>{escape(str(r['status']))}</td>"
        f'<td class="number">{int(r["priority"])}</td>'
        f"<td>{max(0.0, now - float(r['time'])):.0f} s ago</td>{_expires(r['expires'], now)}"
        f"<td>{escape(str(r['detail'] or ''))}</td>"
        f'<td><button data-ack="{_a(str(r["id"]))}">Acknowledge</button></td></tr>'
        for r in records
    )
    names = ("id", "workflow", "job", "gid", "status", "priority", "age", "expires", "detail", "")
    head = "<tr>" + "".join(f"<th>{name}</th>" for name in names) + "</tr>"
    return "".join(parts) + f'<table class="alerts">{head}{rows}</table>'


def _expires(expires: float | None, now: float) -> str:
    """When an alert's time to live ends: never, or in how long (the UTC time in its title)."""
    if expires is None:
        return "<td>never</td>"
    at = datetime.fromtimestamp(float(expires), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    left = max(0.0, float(expires) - now)
    within = (
        f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min" if left < 7200 else f"{left / 3600:.1f} h"
    )
    return f'<td title="{at}">in {within}</td>'


def workflows(definitions: Sequence[Mapping[str, Any]], agents_error: str | None = None) -> str:
    """Each workflow the agents say is deployed: version, agents, its DAG (job, agent and schedule in
    each box); then the files of --workflows DIR not deployed as written."""
    parts = [problem(agents_error)] if agents_error else []
    if not definitions:
        parts.append(problem("no workflow is deployed on an agent that answered"))
    for d in definitions:
        if "error" in d:
            parts.append(f"<section><h2>{escape(d['file'])}</h2>{problem(d['error'])}</section>")
            continue
        facts = [f"version {escape(d['version'])}"]
        if d["deployed"]:
            facts += [f"older versions still deployed: {escape(', '.join(d['older']))}"] if d["older"] else []
            facts += [f"agents {escape(', '.join(d['agents']))} (coordinator {escape(d['coordinator'])})"]
            if d["missing"]:
                facts.append(f'<span class="problem">no answer for {escape(", ".join(d["missing"]))}</span>')
            if d.get("holds"):
                facts.append(f'<span class="on-hold">on hold: {escape("; ".join(d["holds"]))}</span>')
            if "file_version" in d:
                facts.append(f"{escape(d['file'])} has version {escape(d['file_version'])}, not deployed")
        else:
            facts.append(f'<span class="problem">from {escape(d["file"])}, not deployed</span>')
        parts.append(
            f'<section class="workflow" data-workflow="{_a(d["name"])}"'
            f' data-deployed="{_a(str(d["deployed"]).lower())}">'
            f"<h2>{escape(d['name'])}</h2><p>{' · '.join(facts)}</p>{_dag(d)}</section>"
        )
    return "".join(parts)


def _dag(
    definition: Mapping[str, Any],
    states: Mapping[str, str] | None = None,
    running: Mapping[str, tuple[float | None, str]] | None = None,
    now: float = 0.0,
) -> str:
    nodes = [Node(j["job"], f"{j['agent']} · {_days(j['schedule'])}") for j in definition["jobs"]]
    edges = [Edge(after, j["job"], on) for j in definition["jobs"] for after, on in j["after"]]
    # what a job waits for outside its workflow (<wait>, <event>): a box of its own, and an edge
    waits = [(label(c), j["job"]) for j in definition["jobs"] for c in j.get("conditions", [])]
    names = dict.fromkeys(name for (name, _), _ in waits)
    nodes += [Node(name, "event" if name.startswith("event ") else "other workflow") for name in names]
    edges += [Edge(name, job, on) for (name, on), job in waits]
    known = {n.name for n in nodes}
    nodes += [Node(job) for job in (states or {}) if job not in known]  # statuses of jobs not defined here
    return dag_svg(nodes, edges, states, running, now)


def ready_at(generation: Generation, definition: Mapping[str, Any], job: str) -> float | None:
    """When ``job`` could start (epoch seconds): the last end of its predecessors' statuses, or
    the generation's start (APPL_START) for a job with none; None if not known. The agents do not
    say when a job started until it ends: a job starts when it is ready unless its agent is busy
    with ``--max-jobs`` others, and a later attempt started after the earlier ones and its backoff,
    so this is when the job's first attempt began at the earliest."""
    after = next((j["after"] for j in definition["jobs"] if j["job"] == job), None)
    if after is None:
        return None
    ends = [
        s.started + (s.duration or 0.0)
        for name, _ in after
        if (s := generation.jobs.get(name)) is not None and s.started is not None
    ]
    start = generation.jobs.get(APPL_START)
    if not ends and start is not None and start.started is not None:
        ends.append(start.started)
    return max(ends) if ends else None


def _days(schedule: str | Sequence[str]) -> str:
    """A schedule's day words (JOBINFO's list) as the XML's ``schedule`` would say them."""
    if isinstance(schedule, str):
        return schedule
    return "daily" if len(schedule) == len(DAYS) else " ".join(schedule)


# runs -------------------------------------------------------------------------------------------


def generations(monitor: Monitor, live: Live | None = None, query: RunsQuery | None = None) -> dict[str, Any]:
    """The page of generations the grid shows for ``query``, as JSON-ready data: ``generations``
    (newest first; each with its outcome and every job's status), ``page``, ``pages``, ``total``
    (the generations the query keeps)."""
    live = live or Live()
    chosen = select(monitor, live, query or RunsQuery())
    return {
        "generations": [
            {
                "workflow": g.workflow,
                "gid": g.gid,
                "date": g.date,
                "outcome": chosen.outcomes[g.workflow, g.gid],
                "params": g.params or {},
                "jobs": {
                    job: {
                        "status": s.status,
                        "started": s.started,
                        "duration": s.duration,
                        "detail": s.detail,
                    }
                    for job, s in g.jobs.items()
                },
            }
            for g in chosen.found
        ],
        "page": chosen.page,
        "pages": chosen.pages,
        "total": chosen.kept,
    }


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """The Runs page's filter: one workflow or all, an outcome or all, a range of the generations'
    dates (the Trigger's), and the page (of RUNS_PAGE rows, newest first)."""

    workflow: str | None = None
    outcome: str | None = None
    since: date | None = None
    until: date | None = None
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> RunsQuery:
        """ValueError (shown on the page) naming the field that is wrong."""
        workflow = params.get("workflow") or None
        outcome = params.get("status") or None
        if outcome is not None and outcome not in OUTCOMES:
            raise ValueError(f"status: {outcome!r} is not one of {', '.join(OUTCOMES)}")
        since = parse_date(params["since"]) if params.get("since") else None
        until = parse_date(params["until"]) if params.get("until") else None
        page = params.get("page") or "1"
        if not page.isdigit() or int(page) < 1:
            raise ValueError(f"page: {page!r} is not a page number (1, 2, ...)")
        return cls(workflow and check_workflow(workflow), outcome, since, until, int(page))

    def keeps(self, generation: Generation, outcome: str) -> bool:
        if self.workflow is not None and generation.workflow != self.workflow:
            return False
        if self.outcome is not None and outcome != self.outcome:
            return False
        if outcome == NOT_STARTED and self.outcome != NOT_STARTED:  # shown only when asked for
            return False
        day = generation.date or ""
        if self.since is not None and day < self.since.isoformat():
            return False
        return self.until is None or (bool(day) and day <= self.until.isoformat())


RUNS_PAGE = 50  # generations per page of the Runs grid
OUTCOMES = (
    "running",
    WAITING_TURN,
    STARTING,
    NOT_STARTED,
    "SUCCESS",
    "FAILURE",
    "CANCELLED",
    EXPIRED,
    SKIPPED,
)


def runs(
    monitor: Monitor,
    definitions: Sequence[Mapping[str, Any]],
    error: str | None,
    live: Live | None = None,
    query: RunsQuery | None = None,
) -> str:
    """The grid (as Airflow's): one compact row per generation, newest first, RUNS_PAGE to a page,
    those ``query`` keeps; one table per workflow, one column per job in the DAG's order, each cell
    coloured by the job's state. A row opens the generation (:func:`run`)."""
    live, query = live or Live(), query or RunsQuery()
    parts = [problem(error)] if error else []
    chosen = select(monitor, live, query)
    found, kept, pages, number, outcomes = (
        chosen.found,
        chosen.kept,
        chosen.pages,
        chosen.page,
        chosen.outcomes,
    )
    if not monitor.generations:
        parts.append("<p>No generation seen yet (nor remembered by the agents): trigger one.</p>")
        return "".join(parts)
    first = (number - 1) * RUNS_PAGE + 1
    parts.append(
        f'<p class="paging" data-pages="{pages}" data-page="{number}">'
        + (f"{first}-{first + len(found) - 1} of {kept} generations" if found else "no generation")
        + (f" ({len(monitor.generations)} in all)" if kept != len(monitor.generations) else "")
        + "; click one for its DAG, timeline and actions. "
        + (f'<button type="button" data-page-to="{number - 1}">newer</button> ' if number > 1 else "")
        + (f'<button type="button" data-page-to="{number + 1}">older</button>' if number < pages else "")
        + "</p>"
    )
    by_name = {d["name"]: d for d in definitions if "name" in d}
    groups: dict[str, list[Generation]] = {}
    for g in found:
        groups.setdefault(g.workflow, []).append(g)
    for workflow, members in groups.items():
        defined = [j["job"] for j in by_name.get(workflow, {"jobs": []})["jobs"]]
        seen = {job for g in members for job in g.jobs if job not in VIRTUAL}
        order = defined + sorted(seen - set(defined))
        head = "".join(f'<th class="job" title="{_a(job)}"><span>{escape(job)}</span></th>' for job in order)
        rows = []
        for g in members:
            outcome = outcomes[g.workflow, g.gid]
            record = generation_record(g)
            took = "" if record["duration"] is None else f"{record['duration']:.1f} s"
            cells = []
            for job in order:
                state = g.jobs.get(job)
                status = state.status if state is not None else ""
                why = f" ({state.detail})" if state is not None and state.live and state.detail else ""
                cells.append(
                    f'<td class="cell state-{_a(status or "none")}" data-job="{_a(job)}"'
                    f' title="{_a(job)}: {_a(status or "not yet")}{_a(why)}"></td>'
                )
            rows.append(
                f'<tr class="run" data-workflow="{_a(g.workflow)}" data-gid="{_a(g.gid)}"'
                f' data-outcome="{_a(outcome)}" tabindex="0"><td><code>{escape(g.gid)}</code></td>'
                f"<td>{escape(g.date or '')}</td>"
                f'<td class="outcome state-{_slug(outcome)}">{escape(outcome)}</td><td>{took}</td>'
                f"{''.join(cells)}</tr>"
            )
        parts.append(
            f'<section class="grid-workflow" data-workflow="{_a(workflow)}"><h2>{escape(workflow)}</h2>'
            '<table class="runs-grid"><thead><tr><th>gid</th><th>date</th><th>outcome</th>'
            f"<th>took</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
        )
    return "".join(parts)


@dataclass(frozen=True)
class Selected:
    """One page of the generations a :class:`RunsQuery` keeps: ``found`` (newest first), how many
    it keeps in all, the number of pages, this page's number, and every generation's outcome."""

    found: list[Generation]
    kept: int
    pages: int
    page: int
    outcomes: dict[tuple[str, str], str]


def select(monitor: Monitor, live: Live, query: RunsQuery) -> Selected:
    """The page of generations ``query`` asks for (the last page if it asks for one beyond)."""
    outcomes = {key: live.outcome(g) for key, g in monitor.generations.items()}
    kept = [g for key, g in monitor.generations.items() if query.keeps(g, outcomes[key])]
    pages = max((len(kept) + RUNS_PAGE - 1) // RUNS_PAGE, 1)
    number = min(query.page, pages)
    found = _newest(kept, number * RUNS_PAGE)[(number - 1) * RUNS_PAGE :]
    return Selected(found, len(kept), pages, number, outcomes)


def run(
    monitor: Monitor,
    definitions: Sequence[Mapping[str, Any]],
    workflow: str,
    gid: str,
    live: Live | None = None,
) -> str:
    """One generation: its outcome, its DAG coloured by job state, its timeline, Cancel or Rerun,
    Hold, Release, and Approve or Reject for each approval step awaiting approval; a
    running job with its agent, its attempt and the time since it was ready, which the script
    keeps counting. ValueError if the dashboard does not know it."""
    live = live or Live()
    now = live.now
    g = monitor.generations.get((workflow, gid))
    if g is None:
        raise ValueError(f"no generation {gid} of {workflow} is known to the dashboard")
    by_name = {d["name"]: d for d in definitions if "name" in d}
    states = {job: s.status for job, s in g.jobs.items() if job not in VIRTUAL}
    definition = by_name.get(g.workflow, {"jobs": []})
    defined = [j["job"] for j in definition["jobs"]]
    order = defined + [job for job in states if job not in defined]
    agents = {j["job"]: j["agent"] for j in definition["jobs"]}
    running: dict[str, tuple[float | None, str]] = {}
    bars = []
    for job in order:
        state = g.jobs.get(job)
        if state is None:
            bars.append(Bar(job, "waiting"))
            continue
        if state.live and state.status != RUNNING:  # its agent's JOBSTATE: held, waiting, awaiting
            bars.append(Bar(job, state.status, note=state.detail))
            continue
        if state.status != RUNNING:
            bars.append(Bar(job, state.status, state.started, state.duration))
            continue
        attempt, started = live.attempts.get((g.workflow, g.gid, job), (0, None))
        if started is None and state.live:  # its agent said when it started (JOBSTATE RUNNING)
            started = state.started
        if started is None:  # not asked yet, or an agent that records no start: since it was ready
            started = ready_at(g, definition, job)
        facts = [*([f"attempt {attempt}"] if attempt else []), agents.get(job, "?")]
        running[job] = (started, "".join(f" · {fact}" for fact in facts))
        bars.append(Bar(job, RUNNING, started, None if started is None else max(now - started, 0.0)))
    outcome = live.outcome(g)
    detail = f" ({g.end.detail})" if g.end is not None and g.end.detail else ""
    return (
        f'<section class="generation" data-workflow="{_a(g.workflow)}" data-gid="{_a(g.gid)}"'
        f' data-outcome="{_a(outcome)}"><h2>{escape(g.workflow)} <code>{escape(g.gid)}</code>'
        f' {escape(g.date or "")} <span class="outcome state-{_slug(outcome)}">{escape(outcome)}</span>'
        f"{escape(detail)}</h2>{_params(g)}{_missed(g)}{_taken(g)}{_actions(g, order, outcome)}"
        f"{holding.controls(not g.ended and outcome not in (STARTING, NOT_STARTED), order, states)}"
        "<p>Click a job for its log.</p>"
        f'<div class="pictures">{_dag(definition, states, running, now)}{gantt_svg(bars)}'
        "</div></section>"
    )


def _params(generation: Generation) -> str:
    """The run parameters its Trigger carried, a line of ``KEY=VALUE`` (nothing without any)."""
    if not generation.params:
        return ""
    shown = " ".join(
        f"<code>{escape(key)}={escape(value)}</code>" for key, value in generation.params.items()
    )
    return f'<p class="params">Parameters: {shown}</p>'


def _missed(generation: Generation) -> str:
    """The deadlines it missed (their alerts wait on the Alerts page), nothing if none."""
    if not generation.missed:
        return ""
    names = ", ".join("the generation" if job == "APPL_END" else job for job in generation.missed)
    return f'<p class="deadline-missed">Deadline missed: {escape(names)}</p>'


def _taken(generation: Generation) -> str:
    """The jobs a standby agent ran, taken over from their own (docs/workflows.md, Standby
    agents), nothing if none."""
    taken = taken_over(generation)
    if not taken:
        return ""
    shown = "; ".join(f"{job} from {who}" for job, who in taken.items())
    return f'<p class="taken-over">Taken over: {escape(shown)}</p>'


def _actions(generation: Generation, jobs: Sequence[str], outcome: str) -> str:
    """Cancel while it runs; once ended, rerun it (every job, or from one and those after it);
    nothing for a generation nobody started (there is nothing to cancel or rerun)."""
    if outcome in (STARTING, NOT_STARTED):
        return ""
    if not generation.ended:
        return '<p class="actions"><button type="button" data-action="cancel">Cancel</button></p>'
    options = "".join(f'<option value="{_a(job)}">{escape(job)}</option>' for job in jobs)
    return (
        '<p class="actions"><label>Rerun from <select data-rerun-from><option value="">every job</option>'
        f'{options}</select></label> <button type="button" data-action="rerun">Rerun</button></p>'
    )


def job_log(found: Mapping[str, Any]) -> str:
    """The log panel: what the agent sent of one attempt's output, and whether it is all of it."""
    facts = [
        f"attempt {found['attempt']} (attempts: {', '.join(map(str, found['attempts'])) or 'none'})",
        f"on {found['agent']}",
    ]
    if found["truncated"]:
        facts.append(f"the last {len(found['text'].encode())} of {found['size']} bytes")
    if not found["ended"]:
        facts.append("still running")
    if "status" in found:  # it ran nothing (NORUN, an approval step): why there is no log
        facts[0] = f"no log: {found['status']}" + (f" ({found['detail']})" if found["detail"] else "")
    return (
        f'<section class="log" data-log="{_a(found["job"])}" data-gid="{_a(found["gid"])}">'
        f"<h2>Log of {escape(found['job'])} in {escape(found['workflow'])}"
        f" <code>{escape(found['gid'])}</code></h2><p>{escape('; '.join(facts))}</p>"
        f"<pre>{escape(found['text']) or '(no output)'}</pre></section>"
    )


def shown(monitor: Monitor, live: Live | None = None) -> list[Generation]:
    """The generations the Runs page shows: the newest RUNS_SHOWN, but not those nobody started
    (with ``live``, which knows when they were first seen)."""
    found = (g for g in monitor.generations.values())
    if live is not None:
        found = (g for g in found if live.outcome(g) != NOT_STARTED)
    return _newest(found, RUNS_SHOWN)


def _newest(generations: Iterable[Generation], limit: int) -> list[Generation]:
    """As ``wfm.operations.newest`` (by start, those not started first), computing each start once
    and keeping only the ``limit`` first: 10,000 generations kept, one page asked."""

    def key(generation: Generation) -> tuple[bool, float]:
        starts = [s.started for s in generation.jobs.values() if s.started]
        return (not starts, min(starts) if starts else 0.0)

    return heapq.nlargest(limit, generations, key=key)


# history ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    """The History page's form: a date range, a period, and one workflow or all."""

    since: date
    until: date
    by: str = "day"
    workflow: str | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str], today: date) -> HistoryQuery:
        """ValueError (shown on the page) naming the field that is wrong."""
        since = parse_date(params["since"]) if params.get("since") else today - timedelta(days=30)
        until = parse_date(params["until"]) if params.get("until") else today
        by = params.get("by") or "day"
        if by not in PERIODS:
            raise ValueError(f"by: {by!r} is not one of {', '.join(PERIODS)}")
        if until < since:
            raise ValueError(f"the range ends ({until}) before it starts ({since})")
        workflow = params.get("workflow") or None
        return cls(since, until, by, workflow and check_workflow(workflow))

    def compute(self, store: Any) -> tuple[list[Any], list[Any]]:
        """The report's rows in the range, and the summary per job over it (run in the Spark thread)."""
        from wfm.history.report import (
            job_report,
            job_summary,
        )  # Spark: only when the History page is asked for

        since = datetime(self.since.year, self.since.month, self.since.day, tzinfo=UTC).timestamp()
        rows = [r for r in job_report(store, self.workflow, since, self.by) if r.period <= self.until]
        return rows, job_summary(store, self.workflow, since, self.until)


def history(query: HistoryQuery, state: str, result: Any) -> str:
    """A summary table per job over the range (runs, failures, NORUNs, mean, p50 and p95 duration),
    then two charts per job (runs and failures; mean and p95 duration) over the periods, side by
    side; or where Spark is."""
    if state == "none":
        return problem("no history store (start wfm web with --store DIR)")
    if state == "starting":
        return '<p class="pending" data-pending="1">Starting Spark (the first query takes a while) ...</p>'
    if state == "computing":
        return '<p class="pending" data-pending="1">Computing the report ...</p>'
    if state == "error":
        return problem(str(result))
    rows, summaries = result
    if not rows:
        return f"<p>No runs from {query.since} to {query.until}.</p>"
    periods = sorted({r.period for r in rows})
    labels = [p.isoformat() for p in periods]
    jobs: dict[tuple[str, str], dict[date, Any]] = {}
    for r in rows:
        jobs.setdefault((r.workflow, r.job), {})[r.period] = r
    many = "" if len(periods) == 1 else "s"
    parts = [f"<p>{len(jobs)} jobs, {len(periods)} {query.by}{many} from {query.since} to {query.until}.</p>"]
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "workflow",
            "job",
            "runs",
            "failures",
            "failed %",
            "NORUN",
            "mean (s)",
            "p50 (s)",
            "p95 (s)",
        )
    )
    body = []
    for s in summaries:
        rate = f"{100 * s.failures / s.runs:.0f} %" if s.runs else ""
        cells = [
            f"<td>{escape(s.workflow)}</td>",
            f'<td><a href="#chart-{_a(s.workflow)}-{_a(s.job)}">{escape(s.job)}</a></td>',
            *(f'<td class="number">{v}</td>' for v in (s.runs, s.failures, rate, s.noruns)),
            *(
                f'<td class="number">{_seconds(v)}</td>'
                for v in (s.mean_duration, s.p50_duration, s.p95_duration)
            ),
        ]
        failing = " failing" if s.failures else ""
        body.append(f'<tr class="summary{failing}" data-job="{_a(s.job)}">{"".join(cells)}</tr>')
    parts.append(f'<table class="grid history-summary"><tr>{head}</tr>{"".join(body)}</table>')
    charts = []
    for (workflow, job), by_period in sorted(jobs.items()):

        def values(name: str, table: dict[date, Any] = by_period) -> list[float | None]:
            return [getattr(table[p], name) if p in table else None for p in periods]

        counts = line_chart_svg(
            f"{workflow}/{job}: runs, failures",
            labels,
            [Series("runs", values("runs"), "bar"), Series("failures", values("failures"), "bar")],
        )
        durations = line_chart_svg(
            f"{workflow}/{job}: duration (s)",
            labels,
            [Series("mean", values("mean_duration")), Series("p95", values("p95_duration"))],
        )
        charts.append(
            f'<section class="job-history" id="chart-{_a(workflow)}-{_a(job)}" data-job="{_a(job)}">'
            f"{counts}{durations}</section>"
        )
    parts.append(f'<div class="charts">{"".join(charts)}</div>')
    return "".join(parts)


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _a(text: str) -> str:
    return escape(text, quote=True)


def _slug(text: str) -> str:
    """A state as one CSS class word (``not started``: ``not-started``)."""
    return _a(text.replace(" ", "-"))
