"""The dashboard's pictures, drawn on the server as SVG text: pure functions of plain data, so a test
can read what a page will show without a browser, and the page needs no script library to draw.

Every element a test or a script may look for carries a ``data-`` attribute: ``data-job`` and
``data-state`` on a job of a DAG, ``data-broker`` on a broker, ``data-link`` on a link.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from math import cos, pi, sin

__all__ = [
    "Bar",
    "Edge",
    "Node",
    "Series",
    "dag_svg",
    "elapsed",
    "gantt_svg",
    "graph_svg",
    "layers",
    "line_chart_svg",
]

RUNNING = "RUNNING"  # a job's state while it runs (what the agents answer; it has no status yet)
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 46, 60, 18, 12


@dataclass(frozen=True, slots=True)
class Node:
    """A job of a DAG: its name and a second line (agent, schedule)."""

    name: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class Edge:
    """``after`` -> ``job``, taken when ``after`` ends as ``on`` accepts (success, failure, always)."""

    after: str
    job: str
    on: str = "success"


def layers(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Columns of a left-to-right drawing: a node's column is the length of the longest path to it,
    so every edge points right; within a column, nodes are ordered by the mean row of their
    predecessors (fewer crossings), ties in the given order. Edges naming unknown nodes are ignored."""
    known = set(nodes)
    before: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        if a in known and b in known:
            before[b].append(a)
    column: dict[str, int] = {}

    def depth(node: str, seen: frozenset[str]) -> int:
        if node not in column:
            preds = [p for p in before[node] if p not in seen]  # a cycle (never valid) cannot loop
            column[node] = 1 + max((depth(p, seen | {node}) for p in preds), default=-1)
        return column[node]

    for node in nodes:
        depth(node, frozenset())
    result: list[list[str]] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    row: dict[str, float] = {}
    order = {n: i for i, n in enumerate(nodes)}
    for number, members in enumerate(result):
        members.extend(n for n in nodes if column[n] == number)
        if number:
            members.sort(key=lambda n: (sum(row[p] for p in before[n]) / max(len(before[n]), 1), order[n]))
        row.update((n, float(i)) for i, n in enumerate(members))
    return result


def elapsed(seconds: float) -> str:
    """A duration as a person reads it: ``42 s``, ``3 min 05 s``, ``2 h 07 min`` (the script's
    ``elapsed`` says the same as the page counts on)."""
    whole = max(int(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole // 60 % 60:02d} min"


def _ticking(since: float | None, rest: str, now: float, cls: str, x: float, y: float, anchor: str) -> str:
    """``running ELAPSED REST`` as SVG text; with ``since``, ``data-since`` and ``data-rest`` let
    the page's script count on every second without a redraw."""
    if since is None:
        return (
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">running{escape(rest)}</text>'
        )
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}" data-since="{since:.3f}"'
        f' data-rest="{_attr(rest)}">running {elapsed(now - since)}{escape(rest)}</text>'
    )


def dag_svg(
    nodes: Sequence[Node],
    edges: Sequence[Edge],
    states: Mapping[str, str] | None = None,
    running: Mapping[str, tuple[float | None, str]] | None = None,
    now: float = 0.0,
) -> str:
    """A workflow left to right: one box per job (coloured by ``states``, job -> status, when
    given), an arrow per edge; edges taken on failure are dashed, on always dotted, and labelled.
    ``running``: job -> (since when, in epoch seconds, or None; what follows: attempt, agent),
    shown as ``running 12 s · attempt 1 · agentB`` in its box."""
    states, running = states or {}, running or {}
    columns = layers([n.name for n in nodes], [(e.after, e.job) for e in edges])
    notes = {n.name: n.note for n in nodes}
    where: dict[str, tuple[float, float]] = {}
    for c, members in enumerate(columns):
        for r, name in enumerate(members):
            where[name] = (PAD + c * (BOX_W + GAP_X), PAD + r * (BOX_H + GAP_Y))
    width = PAD * 2 + max(len(columns), 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + max((len(m) for m in columns), default=1) * (BOX_H + GAP_Y) - GAP_Y
    out = [_open(width, height, "dag")]
    out.append(
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7"'
        ' orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#555"/></marker></defs>'
    )
    for edge in edges:
        if edge.after not in where or edge.job not in where:
            continue
        (x1, y1), (x2, y2) = where[edge.after], where[edge.job]
        x1, y1, x2, y2 = x1 + BOX_W, y1 + BOX_H / 2, x2, y2 + BOX_H / 2
        middle = (x1 + x2) / 2
        out.append(
            f'<path class="edge on-{_attr(edge.on)}" data-edge="{_attr(edge.after)}-{_attr(edge.job)}"'
            f' d="M{x1:.0f},{y1:.0f} C{middle:.0f},{y1:.0f} {middle:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"'
            ' marker-end="url(#arrow)"/>'
        )
        if edge.on != "success":
            out.append(
                f'<text class="edge-label" x="{middle:.0f}" y="{(y1 + y2) / 2 - 4:.0f}"'
                f' text-anchor="middle">{escape(edge.on)}</text>'
            )
    for name, (x, y) in where.items():
        state = states.get(name, "")
        out.append(
            f'<g class="job state-{_attr(state or "none")}" data-job="{_attr(name)}"'
            f' data-state="{_attr(state)}">'
            f"<title>{escape(name)}{': ' + escape(state) if state else ''}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{x + BOX_W / 2}" y="{y + 19}" text-anchor="middle" class="name">{escape(name)}</text>'
            + (
                _ticking(*running[name], now, "note", x + BOX_W / 2, y + 36, "middle")
                if name in running
                else f'<text x="{x + BOX_W / 2}" y="{y + 36}" text-anchor="middle" class="note">'
                f"{escape(state or notes.get(name, ''))}</text>"
            )
            + "</g>"
        )
    out.append("</svg>")
    return "".join(out)


def graph_svg(
    nodes: Sequence[tuple[str, str]],
    links: Sequence[tuple[str, str]],
    size: int = 420,
    hosted: Mapping[str, Sequence[str]] | None = None,
    notes: Mapping[str, str] | None = None,
    link_rates: Mapping[tuple[str, str], tuple[float | None, float | None]] | None = None,
) -> str:
    """Brokers in a line (up to three) or on a circle, and their links: ``nodes``
    are (id, css class: ``reached`` or ``unreached``), ``links`` pairs of ids; ``hosted``: the
    clients hanging off each broker (drawn as small boxes below it, or outward on a circle),
    ``notes``: a line under a broker's name (its rates); ``link_rates``: frames per second each
    way of a link (a to b, b to a), written at its middle."""
    hosted, notes, link_rates = hosted or {}, notes or {}, link_rates or {}
    count = len(nodes)
    most = max((len(hosted.get(name, ())) for name, _ in nodes), default=0)
    if count <= 3:  # a line reads better: left to right, in the order given
        width = max(size, 200 * count)
        step = (width - 180) / max(count - 1, 1)  # 90 on each side: room for a rate's line
        where = {name: (90 + i * step, 60.0) for i, (name, _) in enumerate(nodes)}
        away = {name: (0.0, 1.0) for name, _ in nodes}
        height = 120 + most * 22
    else:
        width = size + 2 * 22 * most
        radius, centre = size / 2 - 50, width / 2
        where, away = {}, {}
        for i, (name, _) in enumerate(nodes):
            angle = pi + 2 * pi * i / count
            where[name] = (centre + radius * cos(angle), centre + radius * sin(angle))
            away[name] = (cos(angle), sin(angle))
        height = width
    out = [_open(width, height, "overlay")]
    for a, b in links:
        if a in where and b in where:
            (x1, y1), (x2, y2) = where[a], where[b]
            out.append(
                f'<line class="link" data-link="{_attr(a)}-{_attr(b)}" x1="{x1:.0f}" y1="{y1:.0f}"'
                f' x2="{x2:.0f}" y2="{y2:.0f}"/>'
            )
            if (a, b) in link_rates:
                out.append(_link_rate(a, b, link_rates[a, b], ((x1 + x2) / 2, (y1 + y2) / 2)))
    for name, _ in nodes:
        x, y = where[name]
        dx, dy = away[name]
        for i, client in enumerate(hosted.get(name, ())):
            cx, cy = x + dx * (52 + 22 * i), y + dy * (52 + 22 * i)
            out.append(
                f'<g class="client" data-client="{_attr(client)}" data-at="{_attr(name)}">'
                f'<line class="attach" x1="{x:.0f}" y1="{y:.0f}" x2="{cx:.0f}" y2="{cy:.0f}"/>'
                f'<rect x="{cx - 45:.0f}" y="{cy - 9:.0f}" width="90" height="18" rx="9"/>'
                f'<text x="{cx:.0f}" y="{cy + 4:.0f}" text-anchor="middle">{escape(client)}</text></g>'
            )
    for name, kind in nodes:
        x, y = where[name]
        out.append(
            f'<g class="broker {_attr(kind)}" data-broker="{_attr(name)}" tabindex="0">'
            f'<circle cx="{x:.0f}" cy="{y:.0f}" r="26"/>'
            f'<text x="{x:.0f}" y="{y + 5:.0f}" text-anchor="middle">{escape(name)}</text>'
            + (
                f'<text x="{x:.0f}" y="{y - 33:.0f}" text-anchor="middle" class="rate">'
                f"{escape(notes[name])}</text>"
                if notes.get(name)
                else ""
            )
            + "</g>"
        )
    out.append("</svg>")
    return "".join(out)


def _link_rate(a: str, b: str, rates: tuple[float | None, float | None], middle: tuple[float, float]) -> str:
    """A link's frames per second each way, at its middle; the hover names the directions."""
    ab, ba = (f"{rate:g}" if rate is not None else "?" for rate in rates)
    return (
        f'<text class="link-rate" data-link="{_attr(a)}-{_attr(b)}" x="{middle[0]:.0f}"'
        f' y="{middle[1] - 6:.0f}" text-anchor="middle">{ab} ⇄ {ba} /s'
        f"<title>{escape(a)} → {escape(b)}: {ab} frames/s; {escape(b)} → {escape(a)}: {ba} frames/s"
        "</title></text>"
    )


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of a timeline: a job that ran from ``start`` for ``duration`` seconds (epoch
    seconds; None: it did not run, e.g. NORUN), ended in ``state``; ``note`` says more of a job
    that has not run (what a held job waits for)."""

    job: str
    state: str
    start: float | None = None
    duration: float | None = None
    note: str = ""


def gantt_svg(bars: Sequence[Bar], width: int = 640) -> str:
    """A timeline: one row per job, a bar from its start to its end, coloured by its state; a job
    that did not run gets a row with its state and no bar. The scale is seconds from the first start."""
    label, row = 120, 22
    timed = [b for b in bars if b.start is not None]
    first = min((b.start for b in timed if b.start is not None), default=0.0)
    last = max(((b.start or 0.0) + (b.duration or 0.0) for b in timed), default=first)
    span = max(last - first, 0.001)
    scale = (width - label - 20) / span
    height = row * len(bars) + 28
    out = [_open(width, height, "gantt")]
    for i, bar in enumerate(bars):
        y = 4 + i * row
        out.append(
            f'<g class="row state-{_attr(bar.state)}" data-job="{_attr(bar.job)}"'
            f' data-state="{_attr(bar.state)}">'
            f'<text x="4" y="{y + 15}" class="name">{escape(bar.job)}</text>'
        )
        if bar.start is None:
            note = escape(bar.state) + (f": {escape(bar.note)}" if bar.note else "")
            out.append(f'<text x="{label}" y="{y + 15}" class="note">{note}</text>')
        else:
            x = label + (bar.start - first) * scale
            w = max((bar.duration or 0.0) * scale, 2.0)
            seconds = "running" if bar.duration is None or bar.state == RUNNING else f"{bar.duration:.1f} s"
            out.append(
                f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" rx="3">'
                f"<title>{escape(bar.job)} {escape(bar.state)} {seconds}</title></rect>"
            )
            if bar.state == RUNNING:  # it ends now, at the right edge: counted on inside the bar
                out.append(
                    _ticking(
                        bar.start, "", bar.start + (bar.duration or 0.0), "note", x + w - 4, y + 15, "end"
                    )
                )
        out.append("</g>")
    axis = height - 8
    out.append(
        f'<text x="{label}" y="{axis}" class="note">0 s</text>'
        f'<text x="{width - 20}" y="{axis}" class="note" text-anchor="end">{span:.1f} s</text></svg>'
    )
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Series:
    """A named line (or bars) of values per category; None where there is no value."""

    name: str
    values: Sequence[float | None]
    kind: str = "line"  # or "bar"


def line_chart_svg(title: str, categories: Sequence[str], series: Sequence[Series], width: int = 420) -> str:
    """A small chart over ``categories`` (periods): bars side by side and lines on one y axis from 0
    to the largest value, a dot on each line's every value (so one period, or a value between two
    gaps, shows), and a legend whose swatches are drawn with each series' own class, so their
    colours are the bars' and the lines'. Any number of categories: the bars share the width."""
    height, left, bottom, top = 180, 40, 24, 26
    values = [v for s in series for v in s.values if v is not None]
    peak = max(values, default=0.0) or 1.0
    plot_w, plot_h = width - left - 10, height - top - bottom
    step = plot_w / max(len(categories), 1)
    bars = [s for s in series if s.kind == "bar"]
    dot = max(min(step / 4, 3.0), 1.2)

    def y(value: float) -> float:
        return top + plot_h - value * plot_h / peak

    out = [_open(width, height, "chart")]
    out.append(f'<text x="{left}" y="14" class="title">{escape(title)}</text>')
    out.append(
        f'<polyline class="axis" points="{left},{top} {left},{top + plot_h} {left + plot_w},{top + plot_h}"/>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" class="note">{peak:g}</text>'
        f'<text x="{left - 4}" y="{top + plot_h + 4}" text-anchor="end" class="note">0</text>'
    )
    legend_x = width - 10 - 70 * len(series)
    for number, s in enumerate(series):
        at = legend_x + 70 * number
        swatch = (
            f'<rect class="swatch series-{number}" x="{at}" y="6" width="10" height="10"/>'
            if s.kind == "bar"
            else f'<line class="swatch series-{number} line" x1="{at}" y1="11" x2="{at + 10}" y2="11"/>'
        )
        out.append(
            f'<g class="legend" data-series="{_attr(s.name)}">{swatch}'
            f'<text x="{at + 14}" y="15" class="legend-name">{escape(s.name)}</text></g>'
        )
        if s.kind == "bar":
            slot = bars.index(s)
            bar_w = min(step * 0.8 / max(len(bars), 1), 28.0)  # one period: not a slab
            group = bar_w * len(bars)
            for i, value in enumerate(s.values):
                if value is not None:
                    x = left + i * step + (step - group) / 2 + slot * bar_w
                    out.append(
                        f'<rect class="series-{number} bar" x="{x:.1f}" y="{y(value):.1f}"'
                        f' width="{bar_w:.1f}" height="{top + plot_h - y(value):.1f}">'
                        f"<title>{escape(categories[i])} {escape(s.name)} {value:g}</title></rect>"
                    )
        else:
            points = [
                (left + i * step + step / 2, value) for i, value in enumerate(s.values) if value is not None
            ]
            if len(points) > 1:
                line = " ".join(f"{x:.1f},{y(v):.1f}" for x, v in points)
                out.append(f'<polyline class="series-{number} line" points="{line}"/>')
            for (x, value), i in zip(
                points, [i for i, v in enumerate(s.values) if v is not None], strict=True
            ):
                out.append(
                    f'<circle class="series-{number} dot" cx="{x:.1f}" cy="{y(value):.1f}" r="{dot:.1f}">'
                    f"<title>{escape(categories[i])} {escape(s.name)} {value:g}</title></circle>"
                )
    if categories:
        out.append(f'<text x="{left}" y="{height - 6}" class="note">{escape(categories[0])}</text>')
        if len(categories) > 1:
            out.append(
                f'<text x="{left + plot_w}" y="{height - 6}" class="note" text-anchor="end">'
                f"{escape(categories[-1])}</text>"
            )
    out.append("</svg>")
    return "".join(out)


def _open(width: float, height: float, kind: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}" width="{width:.0f}" height="{height:.0f}"'
        f' viewBox="0 0 {width:.0f} {height:.0f}" role="img">'
    )


def _attr(text: str) -> str:
    return escape(text, quote=True)
