"""The dashboard's holds and approvals: the controls a generation's view shows (hold or release
it, a job of the workflow or the whole workflow; approve or reject each approval step awaiting
approval), and the checks of what ``POST /api/hold``, ``/api/release`` and ``/api/approve`` are
given. The agents decide (``wfm hold``, ``wfm release``, ``wfm approve`` send the same envelopes);
what a job is doing comes from the agents' RUNS answers, as QUEUED and RUNNING do."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape

from workflow_messages import check_name
from workflow_messages.approvals import MAX_COMMENT

__all__ = ["AWAITING", "HELD", "acks_record", "controls", "verdict"]

HELD, AWAITING = "HELD", "AWAITING"  # a job a hold keeps from starting; an approval step waiting


def controls(running: bool, jobs: Sequence[str], states: Mapping[str, str]) -> str:
    """Hold and Release (this generation, one job in every generation, or the whole workflow) while
    the generation runs (started, not ended); Approve and Reject for each job awaiting approval."""
    if not running:
        return ""
    scopes = [
        ("", "this generation"),
        *((job, f"{job}, every generation") for job in jobs),
        ("*", "the workflow"),
    ]
    options = "".join(f'<option value="{_a(value)}">{escape(label)}</option>' for value, label in scopes)
    parts = [
        f'<p class="holds"><label>Hold or release <select data-hold-scope>{options}</select></label>'
        ' <button type="button" data-action="hold">Hold</button>'
        ' <button type="button" data-action="release">Release</button></p>'
    ]
    awaiting = [job for job in jobs if states.get(job) == AWAITING]
    if awaiting:
        comment = f'<label>Comment <input data-approval-comment maxlength="{MAX_COMMENT}"></label>'
        buttons = "".join(
            f' <span class="approval">{escape(job)}:'
            + "".join(
                f' <button type="button" data-action="{verb}" data-approval-job="{_a(job)}">'
                f"{verb.title()}</button>"
                for verb in ("approve", "reject")
            )
            + "</span>"
            for job in awaiting
        )
        parts.append(f'<p class="approvals">{comment}{buttons}</p>')
    return "".join(parts)


def verdict(form: Mapping[str, str | None]) -> tuple[str, bool, str]:
    """The job, whether approved, and the comment of an approval's request; ValueError otherwise."""
    job, chosen, comment = form.get("job") or "", form.get("verdict"), form.get("comment") or ""
    check_name(job, "job name")
    if chosen not in ("approve", "reject"):
        raise ValueError(f"verdict must be approve or reject, not {chosen!r}")
    if len(comment) > MAX_COMMENT:
        raise ValueError(f"the comment has {len(comment)} characters, more than {MAX_COMMENT}")
    return job, chosen == "approve", comment


def acks_record(acks: Mapping[str, tuple[str, str]]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """What each agent answered, as JSON, and those that did not take the envelope (one line each)."""
    agents = {agent: {"result": r, "detail": d} for agent, (r, d) in sorted(acks.items())}
    return agents, _refused(acks.items())


def _refused(acks: Iterable[tuple[str, tuple[str, str]]]) -> list[str]:
    return [f"{a}: {r} {d}" for a, (r, d) in sorted(acks) if r not in ("OK", "UNCHANGED")]


def _a(value: str) -> str:
    return escape(value, quote=True)
