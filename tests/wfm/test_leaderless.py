"""Leaderless schedulers and backfill, end to end: real brokers (B1 - B2 - B3), agents and ``wfm
schedule`` / ``wfm backfill`` processes. Runs are counted from what the jobs themselves leave
under ``$WFM_OUTPUT`` (one line per run), not from statuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from tzlocal import get_localzone

from tests.agents.test_processes import STEP, Overlay, overlay, workflow
from tests.processes import WFM, handling, quiet, wait_for
from wfm.slots import slot_gid

__all__ = ["overlay"]  # three brokers in a line and an agent on each, as real processes

RUN_ONCE = {"First": 1, "Middle": 1, "Last": 1}


def deploy(overlay: Overlay, name: str, middle_command: str = f"sh {STEP} middle") -> None:
    middle = (
        f'<job name="Middle" agent="agentB"><after job="First"/><command>{middle_command}</command></job>'
    )
    overlay.deploy(workflow(overlay.tmp, name, middle))
    quiet(overlay.uris)


def scheduler(overlay: Overlay, config: Path, n: int) -> subprocess.Popen[str]:
    """``wfm schedule`` number ``n``, on broker B(n), its own state file (another host), its
    stdout appended to ``schedule-N.out``."""
    with (
        (overlay.tmp / f"schedule-{n}.out").open("a") as out,
        (overlay.tmp / f"schedule-{n}.err").open("a") as err,
    ):
        process = subprocess.Popen(
            [
                WFM,
                "schedule",
                str(config),
                "--broker",
                str(overlay.uris[f"B{n}"]),
                "--state",
                str(overlay.tmp / f"state-{n}.json"),
                "--catch-up",
                "5m",
            ],
            stdout=out,
            stderr=err,
            text=True,
            env={**os.environ, "TZ": "UTC"},
        )
    return process


def fired(overlay: Overlay, n: int) -> list[str]:
    """The gids scheduler ``n`` printed, in all its lives."""
    return [line.split()[-1] for line in (overlay.tmp / f"schedule-{n}.out").read_text().splitlines()]


def slot_time(gid: str) -> datetime:
    return datetime.strptime(gid[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)


def started(overlay: Overlay, name: str) -> set[str]:
    return (
        {path.name for path in (overlay.output / name).iterdir()}
        if (overlay.output / name).exists()
        else set()
    )


def test_three_schedulers_two_killed_and_restarted_start_each_slot_once(overlay: Overlay) -> None:
    deploy(overlay, "TICK")
    config = overlay.tmp / "schedule.toml"
    config.write_text('[workflows.TICK]\ncron = "* * * * * *"  # every second\n')
    schedulers = {n: scheduler(overlay, config, n) for n in (1, 2, 3)}
    for process in schedulers.values():
        handling(process, signal.SIGTERM)
    time.sleep(3)
    for n in (1, 2):  # no goodbye, nothing flushed: what a crash leaves
        schedulers[n].kill()
        schedulers[n].wait(10)
    down = datetime.now(UTC)
    time.sleep(2)  # slots pass with only scheduler 3
    back = datetime.now(UTC)
    for n in (1, 2):  # back, catching up what they missed (scheduler 3 started those already)
        schedulers[n] = scheduler(overlay, config, n)
    for process in schedulers.values():
        handling(process, signal.SIGTERM)
    time.sleep(3)
    for process in schedulers.values():
        process.send_signal(signal.SIGTERM)
    for n, process in schedulers.items():
        assert process.wait(10) == 0, (overlay.tmp / f"schedule-{n}.err").read_text()
        assert "Traceback" not in (overlay.tmp / f"schedule-{n}.err").read_text()
    everyone = [gid for n in schedulers for gid in fired(overlay, n)]
    slots = set(everyone)
    assert len(slots) >= 9, everyone
    assert len(everyone) >= 2 * len(slots), "the schedulers did not fire the same slots"
    assert set(fired(overlay, 3)) <= slots
    overlay.wait_end("TICK", sorted(slots), timeout=30)
    assert started(overlay, "TICK") == slots
    for gid in slots:
        assert overlay.records("TICK", gid) == RUN_ONCE, gid
    # the restarted ones caught up the slots of their downtime, which scheduler 3 had started
    downtime = {gid for gid in fired(overlay, 3) if down < slot_time(gid) < back}
    assert downtime
    for n in (1, 2):
        assert downtime <= set(fired(overlay, n)), n


def schedule(overlay: Overlay) -> Path:
    """DAILY's schedule: 06:00 on workdays, in this host's time zone (as ``wfm backfill`` reads it)."""
    config = overlay.tmp / "daily.toml"
    config.write_text('[workflows.DAILY]\ncron = "0 6 * * *"\ncalendar = "workdays"\n')
    return config


def backfill(overlay: Overlay, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            WFM,
            "backfill",
            "DAILY",
            "--from",
            "2026-11-02",  # a Monday
            "--to",
            "2026-11-08",
            "--schedule",
            str(schedule(overlay)),
            "--broker",
            str(overlay.uris["B1"]),
            "-o",
            "json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_backfill_interrupted_then_rerun_runs_every_workday_once(overlay: Overlay) -> None:
    deploy(overlay, "DAILY", f"sleep 0.5; sh {STEP} middle")
    unknown = [WFM, "backfill", "NOPE", "--from", "2026-11-02", "--to", "2026-11-03"]
    done = subprocess.run(
        [*unknown, "--broker", str(overlay.uris["B1"])], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("wfm: error: ") and "NOPE" in done.stderr
    undeclared = [WFM, "backfill", "DAILY", "--from", "2026-11-02", "--to", "2026-11-03", "--param", "X=1"]
    done = subprocess.run(
        [*undeclared, "--broker", str(overlay.uris["B1"])], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "unknown parameter X (declared: none); nothing started" in done.stderr

    # the schedule ran Monday's slot: that generation is Monday's, not run again
    monday = slot_gid("DAILY", datetime(2026, 11, 2, 6, tzinfo=get_localzone()))
    overlay.trigger("DAILY", [monday], "2026.11.02")
    overlay.wait_end("DAILY", [monday])
    gids = [monday] + [f"2026110{d}-backfill" for d in range(3, 7)]  # Monday to Friday
    first = backfill(overlay, "--concurrency", "2")
    wait_for(lambda: len(started(overlay, "DAILY")) >= 3, "two dates started", timeout=20)
    handling(first, signal.SIGINT)
    first.send_signal(signal.SIGINT)  # Ctrl-C with two generations running
    out, err = first.communicate(timeout=10)
    assert first.returncode == 130, err
    assert err.endswith("wfm: interrupted\n"), err
    assert started(overlay, "DAILY") <= set(gids)

    again = backfill(overlay, "--concurrency", "2")  # waits for those running, starts the others
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted(row["gid"] for row in rows) == sorted(gids)
    assert [row["date"] for row in rows if row["gid"] == monday and row["earlier"]] == ["2026-11-02"]
    assert {row["status"] for row in rows} == {"SUCCESS"}
    assert "5 dates" in err
    overlay.wait_end("DAILY", gids)
    for gid in gids:
        assert overlay.records("DAILY", gid) == RUN_ONCE, gid
    # never more than two at once: from First's start to the last end, as the agents timed them
    spans = []
    for gid in gids:
        jobs = overlay.statuses["DAILY", gid]
        ends = [float(p["started"]) + float(p.get("duration", 0.0)) for p in jobs.values() if "started" in p]
        spans.append((float(jobs["First"]["started"]), max(ends)))
    for at, _ in spans:
        assert sum(start <= at < end for start, end in spans) <= 2, spans

    resumed = backfill(overlay)  # all done: nothing started, each date as it ended
    out, err = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["gid"] for row in rows] == gids and all(row["earlier"] for row in rows)
    time.sleep(1)
    for gid in gids:
        assert overlay.records("DAILY", gid) == RUN_ONCE, gid
