"""The dashboard's pictures, read as XML: what a page will show, without a browser."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from wfm.web.svg import (
    Bar,
    Edge,
    Node,
    Series,
    dag_svg,
    elapsed,
    gantt_svg,
    graph_svg,
    layers,
    line_chart_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
PAYROLL = [
    ("JobA", "JobB", "success"),
    ("JobA", "JobC", "success"),
    ("JobB", "JobD", "success"),
    ("JobC", "JobD", "success"),
    ("JobA", "Alert", "failure"),
]


def parsed(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed, or this raises


def test_layers_put_every_job_right_of_its_predecessors() -> None:
    columns = layers(["JobD", "Alert", "JobC", "JobB", "JobA"], [(a, b) for a, b, _ in PAYROLL])
    assert columns == [["JobA"], ["Alert", "JobC", "JobB"], ["JobD"]]
    column = {job: i for i, jobs in enumerate(columns) for job in jobs}
    assert all(column[a] < column[b] for a, b, _ in PAYROLL)


def test_layers_order_a_column_by_its_predecessors_rows() -> None:
    # B1 above B2 in column 1, so C2 (after B1) goes above C1 (after B2) though given later
    assert layers(["A", "B1", "B2", "C1", "C2"], [("A", "B1"), ("A", "B2"), ("B2", "C1"), ("B1", "C2")]) == [
        ["A"],
        ["B1", "B2"],
        ["C2", "C1"],
    ]


def test_the_dag_colours_each_job_by_its_state_and_marks_failure_edges() -> None:
    nodes = [Node(name, "agentA · daily") for name in ("JobA", "JobB", "JobC", "JobD", "Alert")]
    svg = parsed(dag_svg(nodes, [Edge(*e) for e in PAYROLL], {"JobA": "SUCCESS", "JobC": "NORUN"}))
    jobs = {g.get("data-job"): g for g in svg.iter(f"{SVG}g")}
    assert jobs["JobA"].get("data-state") == "SUCCESS" and "state-SUCCESS" in jobs["JobA"].get("class", "")
    assert jobs["JobC"].get("data-state") == "NORUN" and jobs["JobD"].get("data-state") == ""
    edges = {p.get("data-edge"): p.get("class") for p in svg.iter(f"{SVG}path") if p.get("data-edge")}
    assert (
        len(edges) == 5
        and edges["JobA-Alert"] == "edge on-failure"
        and edges["JobA-JobB"] == "edge on-success"
    )
    assert [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "edge-label"] == ["failure"]


def test_names_are_escaped() -> None:
    svg = parsed(dag_svg([Node("<b>&'\"")], [], {"<b>&'\"": "SUCCESS"}))
    assert [g.get("data-job") for g in svg.iter(f"{SVG}g")] == ["<b>&'\""]


def test_the_overlay_graph_draws_each_link_once_and_brokers_not_reached_apart() -> None:
    svg = parsed(
        graph_svg([("B1", "reached"), ("B2", "reached"), ("B3", "unreached")], [("B1", "B2"), ("B2", "B3")])
    )
    assert [line.get("data-link") for line in svg.iter(f"{SVG}line")] == ["B1-B2", "B2-B3"]
    brokers = {g.get("data-broker"): g.get("class") for g in svg.iter(f"{SVG}g")}
    assert brokers == {"B1": "broker reached", "B2": "broker reached", "B3": "broker unreached"}
    ring = parsed(graph_svg([(f"B{i}", "reached") for i in range(6)], []))
    centres = {(c.get("cx"), c.get("cy")) for c in ring.iter(f"{SVG}circle")}
    assert len(centres) == 6  # on a circle, none on another


def test_the_gantt_scales_bars_from_the_first_start() -> None:
    bars = [Bar("JobA", "SUCCESS", 100.0, 2.0), Bar("JobB", "FAILURE", 102.0, 2.0), Bar("JobC", "NORUN")]
    svg = parsed(gantt_svg(bars, width=540))  # 400 px for 4 s
    rects = {g.get("data-job"): g.find(f"{SVG}rect") for g in svg.iter(f"{SVG}g")}
    assert rects["JobC"] is None
    assert (float(rects["JobA"].get("x")), float(rects["JobA"].get("width"))) == (120.0, 200.0)  # type: ignore[union-attr]
    assert float(rects["JobB"].get("x")) == 320.0  # type: ignore[union-attr]


def test_a_chart_draws_bars_and_lines_on_one_scale() -> None:
    svg = parsed(
        line_chart_svg(
            "PAYROLL/JobA",
            ["2026-11-01", "2026-11-02"],
            [Series("runs", [4, 2], "bar"), Series("failures", [1, None], "bar"), Series("mean", [1.0, 3.0])],
        )
    )
    bars = [r for r in svg.iter(f"{SVG}rect") if "bar" in r.get("class", "")]
    assert len(bars) == 3  # no bar where there is no value
    heights = [float(r.get("height", 0)) for r in bars]
    assert heights[0] == 4 * heights[2]
    (line,) = [p for p in svg.iter(f"{SVG}polyline") if "line" in p.get("class", "")]
    assert len(line.get("points", "").split()) == 2


def test_a_running_job_counts_its_elapsed_time_in_words_the_script_repeats() -> None:
    assert [elapsed(s) for s in (0, 42.9, 61, 3599, 3600 * 2 + 7 * 60)] == [
        "0 s",
        "42 s",
        "1 min 01 s",
        "59 min 59 s",
        "2 h 07 min",
    ]
    svg = dag_svg([Node("A")], [], {"A": "RUNNING"}, {"A": (100.0, " · agentB")}, now=112.0)
    assert 'data-since="100.000" data-rest=" · agentB">running 12 s · agentB</text>' in svg
    bars = gantt_svg([Bar("A", "RUNNING", 100.0, 12.0)])
    assert 'data-since="100.000" data-rest="">running 12 s</text>' in bars


def test_a_chart_of_one_period_shows_its_values_and_its_legend_is_coloured_as_its_series() -> None:
    svg = parsed(
        line_chart_svg(
            "PAYROLL/JobA",
            ["2026-11-01"],
            [Series("runs", [4], "bar"), Series("mean", [2.5]), Series("p95", [3.0])],
        )
    )
    (bar,) = [r for r in svg.iter(f"{SVG}rect") if "bar" in r.get("class", "")]
    assert float(bar.get("height", 0)) > 0 and bar.get("class") == "series-0 bar"
    dots = [c.get("class") for c in svg.iter(f"{SVG}circle")]
    assert dots == ["series-1 dot", "series-2 dot"]  # a line of one point is a dot, not nothing
    swatches = [e.get("class") for e in svg.iter() if "swatch" in (e.get("class") or "")]
    assert swatches == ["swatch series-0", "swatch series-1 line", "swatch series-2 line"]
