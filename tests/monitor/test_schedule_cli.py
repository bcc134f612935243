"""``wfm schedule``: --dry-run lists the triggers of the next days; bad configs are one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import date
from pathlib import Path

from tests.processes import WFM, handling

ROOT = Path(__file__).parents[2]

CONFIG = """
[workflows.PAYROLL]
cron = "0 6 * * *"
calendar = "workdays"

[workflows.LEDGER]
cron = "15 18 * * *"
holidays = "holidays.txt"
"""


def schedule(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TZ": "UTC"}
    env.pop("WFM_BROKER", None)
    return subprocess.run([WFM, "schedule", *argv], capture_output=True, text=True, timeout=30, env=env)


def test_dry_run_lists_a_week_of_triggers(tmp_path: Path) -> None:
    today = date.today()
    (tmp_path / "holidays.txt").write_text(f"# nothing today\n{today.isoformat()}\n")
    (tmp_path / "s.toml").write_text(CONFIG)
    done = schedule(str(tmp_path / "s.toml"), "--dry-run", "--days", "7")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]  # date time weekday workflow date
    payroll = [row for row in rows if row[3] == "PAYROLL"]
    ledger = [row for row in rows if row[3] == "LEDGER"]
    assert len(payroll) == 5 and {row[2] for row in payroll} <= {"Mon", "Tue", "Wed", "Thu", "Fri"}
    assert len(ledger) in (6, 7) and today.isoformat() not in [row[4] for row in ledger]
    assert [row[:2] for row in rows] == sorted(row[:2] for row in rows)


def test_bad_config_and_missing_broker_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[workflows.PAYROLL]\ncron = 'every day'\n")
    done = schedule(str(tmp_path / "bad.toml"), "--dry-run")
    assert done.returncode == 1
    assert done.stderr.startswith("wfm: error: ") and "workflows.PAYROLL: cron 'every day'" in done.stderr
    assert done.stderr.count("\n") == 1
    (tmp_path / "good.toml").write_text("[workflows.PAYROLL]\ncron = '0 6 * * *'\n")
    done = schedule(str(tmp_path / "good.toml"))
    assert (done.returncode, done.stderr) == (
        2,
        "wfm: error: --broker (or $WFM_BROKER) is needed unless --dry-run\n",
    )


def test_schedule_runs_until_sigterm(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text("[workflows.PAYROLL]\ncron = '0 6 1 1 *'\n")  # no fire during the test
    command = [WFM, "schedule", str(tmp_path / "s.toml"), "--broker", "socket://127.0.0.1:1/B9"]
    scheduler = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    handling(scheduler, signal.SIGTERM)  # started: SIGTERM now asks it to stop
    time.sleep(1.5)
    assert scheduler.poll() is None
    scheduler.send_signal(signal.SIGTERM)
    out, err = scheduler.communicate(timeout=10)
    assert (scheduler.returncode, out, err) == (0, "", "")


def test_dry_run_json(tmp_path: Path) -> None:
    (tmp_path / "holidays.txt").write_text("")
    (tmp_path / "s.toml").write_text(CONFIG)
    done = schedule(str(tmp_path / "s.toml"), "--dry-run", "--days", "7", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {row["workflow"] for row in rows} == {"PAYROLL", "LEDGER"}
    assert all(set(row) == {"time", "workflow", "date"} and row["time"][:10] == row["date"] for row in rows)


def test_the_example_in_the_docs_is_shipped_and_runs() -> None:
    """docs/workflows.md's schedule, copied and pasted: workflows/schedule.toml and its holiday file."""
    docs = (ROOT / "docs" / "workflows.md").read_text()
    example = docs.split("```toml\n")[1].split("```")[0]
    assert (ROOT / "workflows" / "schedule.toml").read_text() == example
    done = schedule(str(ROOT / "workflows" / "schedule.toml"), "--dry-run", "--days", "400")
    assert done.returncode == 0, done.stderr
    ledger = [line.split()[4] for line in done.stdout.splitlines() if line.split()[3] == "LEDGER"]
    assert ledger and "2026-12-25" not in ledger
