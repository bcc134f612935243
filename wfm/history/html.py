"""``wfm report --html``: one self-contained page, the report's table and an inline SVG chart of the
mean duration per job over time (no script, no network resource)."""

from __future__ import annotations

from collections import defaultdict
from html import escape

from wfm.history.report import HEADERS, JobPeriod

__all__ = ["render_html"]

WIDTH, HEIGHT, MARGIN = 900, 360, 50
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def render_html(rows: list[JobPeriod], title: str, jobs_charted: int = 8) -> str:
    """The page; the chart shows the ``jobs_charted`` jobs with the highest mean duration."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    periods = sorted({r.period for r in rows})
    position = {period: index for index, period in enumerate(periods)}
    for r in rows:
        if r.mean_duration is not None:
            series[f"{r.workflow}/{r.job}"].append((position[r.period], r.mean_duration))
    charted = sorted(series, key=lambda job: -max(d for _, d in series[job]))[:jobs_charted]
    top = max((d for job in charted for _, d in series[job]), default=1.0) or 1.0
    span = max(len(periods) - 1, 1)

    def point(index: int, duration: float) -> str:
        x = MARGIN + index * (WIDTH - 2 * MARGIN) / span
        y = HEIGHT - MARGIN - duration * (HEIGHT - 2 * MARGIN) / top
        return f"{x:.1f},{y:.1f}"

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img">',
        f'<polyline fill="none" stroke="#000" points="{MARGIN},{MARGIN} {MARGIN},{HEIGHT - MARGIN} '
        f'{WIDTH - MARGIN},{HEIGHT - MARGIN}"/>',
        f'<text x="{MARGIN}" y="{MARGIN - 10}" font-size="12">mean duration (s), max {top:.1f}</text>',
    ]
    if periods:
        svg.append(f'<text x="{MARGIN}" y="{HEIGHT - 20}" font-size="12">{periods[0]}</text>')
        end = WIDTH - MARGIN
        svg.append(f'<text x="{end}" y="{HEIGHT - 20}" font-size="12" text-anchor="end">{periods[-1]}</text>')
    for number, job in enumerate(charted):
        colour = COLOURS[number % len(COLOURS)]
        points = " ".join(point(i, d) for i, d in series[job])
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>')
        svg.append(
            f'<text x="{WIDTH - MARGIN + 5}" y="{MARGIN + 14 * number}" font-size="11" fill="{colour}">'
            f"{escape(job)}</text>"
        )
    svg.append("</svg>")
    header = "".join(f"<th>{h}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in r.cells()) + "</tr>" for r in rows)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(title)}</title>'
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>"
        f"<h1>{escape(title)}</h1>{''.join(svg)}<table><tr>{header}</tr>{body}</table></body></html>\n"
    )
