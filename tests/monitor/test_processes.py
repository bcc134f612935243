"""``wfm trigger`` and ``wfm monitor`` against real brokers; their one-line errors and exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger

from broker.client import BlockingClient
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, quiet, status, wait_for
from wfm.cli.run import _fire
from wfm.signing import signer_of
from wfm.timetable import Entry
from wfm.triggers import TriggerPublisher
from workflow_messages import JOBSTATUS, Calendar
from workflow_messages.signature import check_publication

TWO = {"B1": [], "B2": ["B1"]}


@pytest.fixture(scope="module")
def overlay() -> Iterator[dict[str, BrokerURI]]:
    with brokers(TWO, heartbeat=1.0) as uris:
        yield uris


def wfm(*argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WFM, *argv], capture_output=True, text=True, timeout=timeout)


def test_trigger_reaches_a_subscriber_on_another_broker(overlay: dict[str, BrokerURI]) -> None:
    with BlockingClient(overlay["B2"]) as subscriber:
        subscriber.subscribe("[class,eq,Trigger],[applname,eq,PAYROLL]")
        done = wfm(
            "trigger",
            "PAYROLL",
            "--date",
            "2026-11-27",
            "--wait",
            "0",
            "--no-check",  # no agent here to ask
            "--broker",
            str(overlay["B1"]),
        )
        assert done.returncode == 0, done.stderr
        gid = done.stdout.strip()
        assert gid.startswith("20") and len(gid.split("-")) == 3
        assert (
            Path(os.environ["XDG_STATE_HOME"]) / "wfm" / "trigger" / "log-0"
        ).stat().st_size > 0  # its outbox
        delivery = subscriber.receive(timeout=5)
    assert delivery is not None
    signed = dict(delivery.publication)
    assert {name: signed.pop(name) for name in ("sequence", "signer", "signature")}
    assert signed == {"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": "2026.11.27"}
    # signed by the deployer key wfm deploy would use here, which agents without TLS trust
    assert check_publication(delivery.publication).key == signer_of(None).signer.key.public_key()


def test_trigger_with_a_given_gid(overlay: dict[str, BrokerURI]) -> None:
    done = wfm(
        "trigger", "PAYROLL", "--gid", "g-given", "--wait", "0", "--no-check", "--broker", str(overlay["B1"])
    )
    assert (done.returncode, done.stdout) == (0, "g-given\n")


def test_trigger_of_a_workflow_nobody_runs_fails(overlay: dict[str, BrokerURI]) -> None:
    with BlockingClient(overlay["B2"]) as historian:  # a subscriber to every Trigger is no coordinator
        historian.subscribe("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,'']")
        done = wfm(
            "trigger",
            "NOSUCH",
            "--gid",
            "g-none",
            "--wait",
            "1",
            "--no-check",
            "--broker",
            str(overlay["B1"]),
        )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "wfm: error: nothing started NOSUCH generation g-none within 1 s: no workflow of that name is"
        " deployed (wfm deploy), or its coordinator agent is not running; the Trigger stays published\n"
    )


def test_trigger_waits_for_the_coordinator_to_start_the_generation(overlay: dict[str, BrokerURI]) -> None:
    """A coordinator on the other broker answers the Trigger with APPL_START; -o json."""
    with BlockingClient(overlay["B2"], "agentA") as coordinator:
        coordinator.subscribe("[class,eq,Trigger],[applname,eq,PAYROLL],[GID,isPresent,'']")
        coordinator.advertise(
            f"[class,eq,{JOBSTATUS}],[applname,eq,PAYROLL],[jobname,isPresent,''],[GID,isPresent,''],"
            "[status,isPresent,''],[detail,isPresent,'']"
        )
        quiet(overlay)
        command = [
            WFM,
            "trigger",
            "PAYROLL",
            "--gid",
            "g-start",
            "--no-check",  # a coordinator that answers no question
            "-o",
            "json",
            "--broker",
            str(overlay["B1"]),
        ]
        trigger = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        delivery = coordinator.receive(timeout=10)
        assert delivery is not None and delivery.publication["GID"] == "g-start"
        coordinator.publish(
            "[class,JOBSTATUS],[applname,PAYROLL],[jobname,APPL_START],[GID,g-start],[status,SUCCESS],[detail,'']"
        )
        out, err = trigger.communicate(timeout=20)
    assert trigger.returncode == 0, err
    assert json.loads(out) == {
        "workflow": "PAYROLL",
        "gid": "g-start",
        "date": datetime.now().date().isoformat(),
    }


def publish_statuses(uri: BrokerURI, gid: str, statuses: list[tuple[str, str, str]]) -> None:
    """What agents and the coordinator would publish: advertise, let routing settle, publish."""
    with BlockingClient(uri) as agent:
        agent.advertise(
            f"[class,eq,{JOBSTATUS}],[applname,eq,PAYROLL],[jobname,isPresent,''],"
            "[GID,isPresent,''],[status,isPresent,''],[detail,isPresent,''],"
            "[agentname,isPresent,''],[attempt,isPresent,0],[duration,isPresent,0]"
        )
        quiet({"B": uri})
        for job, state, detail in statuses:
            extras = ",[agentname,agentA],[attempt,1],[duration,0.5]" if job.startswith("Job") else ""
            agent.publish(
                f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,{job}],[GID,{gid}],"
                f"[status,{state}],[detail,'{detail}']{extras}"
            )


def start_monitor(uri: BrokerURI, *argv: str) -> subprocess.Popen[str]:
    """``wfm monitor ARGV --broker URI``, once its two subscriptions are in place at its broker."""

    def subscriptions() -> int:
        return int(status(uri).get("subscriptions", 0))  # type: ignore[call-overload]

    before = subscriptions()
    command = [WFM, "monitor", *argv, "--broker", str(uri)]
    monitor = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: subscriptions() >= before + 2, "monitor subscribed")
    except AssertionError:
        monitor.kill()
        monitor.communicate()
        raise
    return monitor


@pytest.mark.parametrize(
    ("gid", "end", "code"),
    [
        ("g-ok", ("APPL_END", "SUCCESS", ""), 0),
        ("g-bad", ("APPL_END", "FAILURE", "failed: JobA; skipped: JobB"), 1),
    ],
)
def test_monitor_prints_statuses_and_exits_with_the_generation(
    overlay: dict[str, BrokerURI], gid: str, end: tuple[str, str, str], code: int
) -> None:
    monitor = start_monitor(overlay["B2"], "PAYROLL", "--gid", gid, "-o", "json", "--timeout", "20")
    try:
        publish_statuses(overlay["B1"], "other", [("JobA", "SUCCESS", "exit 0")])  # not watched
        job_a = "FAILURE" if code else "SUCCESS"
        publish_statuses(overlay["B1"], gid, [("APPL_START", "SUCCESS", ""), ("JobA", job_a, "exit 0"), end])
    finally:
        out, err = monitor.communicate(timeout=20)
    assert monitor.returncode == code, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["gid"], line["job"], line["status"]) for line in lines] == [
        (gid, "APPL_START", "SUCCESS"),
        (gid, "JobA", job_a),
        (gid, "APPL_END", end[1]),
    ]
    assert lines[1] == {
        "workflow": "PAYROLL",
        "gid": gid,
        "job": "JobA",
        "status": job_a,
        "detail": "exit 0",
        "agentname": "agentA",
        "attempt": 1,
        "duration": 0.5,
    }
    assert lines[2]["detail"] == end[2]


NO_HISTORY = (
    "wfm: warning: no history of earlier statuses (no historian answered within 0.5 s):"
    " showing what is published from now on"
)


def test_monitor_times_out_with_status_3(overlay: dict[str, BrokerURI]) -> None:
    done = wfm("monitor", "--gid", "never", "--timeout", "0.5", "--broker", str(overlay["B2"]))
    assert (done.returncode, done.stdout) == (3, "")
    waiting, *warning, error = done.stderr.splitlines()
    assert waiting == "wfm: waiting for generation never of any workflow to end"
    assert error == "wfm: error: timed out after 0.5 s"
    assert warning in ([], [NO_HISTORY]), "the history's answer (none here) races the timeout"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trigger", "2PAY"], "invalid workflow name '2PAY'"),
        (["trigger", "PAY", "--date", "2026-02-30"], "invalid date '2026-02-30'"),
        (["trigger", "PAY", "--gid", "a b"], "invalid gid 'a b'"),
        (["trigger", "PAY"], "cannot trigger PAY: cannot connect"),
        (["monitor"], "cannot connect to socket://127.0.0.1:1/B9"),
        (["monitor", "--gid", "-x"], "invalid gid '-x'"),
        (["monitor", "--timeout", "0"], "0.0 is not in the range x>0"),
        (["monitor", "PAY", "--broker", "nowhere"], "Invalid value for '--broker'"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str) -> None:
    done = wfm(*argv) if "--broker" in argv else wfm(*argv, "--broker", "socket://127.0.0.1:1/B9")
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        ("0", "Invalid value for '--ttl': '0' is not a time to live above 0 and at most 365d"),
        ("400d", "Invalid value for '--ttl': '400d' is not a time to live above 0 and at most 365d"),
        ("soon", "Invalid value for '--ttl': 'soon' is not a duration: give a number with ms, s, m, h or d"),
    ],
)
def test_a_bad_ttl_is_a_one_line_usage_error(ttl: str, message: str) -> None:
    done = wfm("trigger", "PAY", "--ttl", ttl, "--broker", "socket://127.0.0.1:1/B9")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"wfm: error: {message}") and done.stderr.count("\n") == 1


def test_trigger_help_says_what_ttl_does() -> None:
    done = wfm("trigger", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--ttl DURATION" in text and "the generation ends EXPIRED" in text
    assert "if it runs S seconds ahead of this one, the Trigger expires S seconds early" in text


def test_a_schedule_fire_triggers_only_on_days_its_calendar_allows(overlay: dict[str, BrokerURI]) -> None:
    today = datetime.now(ZoneInfo("UTC")).date()  # the day of the fire, in the cron's zone
    cron = CronTrigger.from_crontab("0 6 * * *", timezone=ZoneInfo("UTC"))
    with BlockingClient(overlay["B2"]) as subscriber, TriggerPublisher(overlay["B1"]) as publisher:
        subscriber.subscribe("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,'']")
        slot = datetime(today.year, today.month, today.day, 6, tzinfo=ZoneInfo("UTC"))  # today's fire
        _fire(Entry("HOLIDAY", cron, Calendar(holidays=frozenset({today}))), publisher, slot)
        _fire(Entry("WORKDAY", cron, Calendar()), publisher, slot)
        delivery = subscriber.receive(timeout=5)
        assert delivery is not None and subscriber.receive(timeout=0.5) is None
    assert delivery.publication["applname"] == "WORKDAY"
    assert delivery.publication["schedule"] == today.strftime("%Y.%m.%d")


def test_monitor_watch_keeps_going_until_ctrl_c(overlay: dict[str, BrokerURI]) -> None:
    monitor = start_monitor(overlay["B2"], "PAYROLL", "--watch")
    try:
        publish_statuses(overlay["B1"], "g-w", [("JobA", "SUCCESS", "exit 0"), ("APPL_END", "SUCCESS", "")])
        time.sleep(1)  # past the end of its first generation, a monitor with --watch goes on
        assert monitor.poll() is None
        monitor.send_signal(signal.SIGINT)
    finally:
        out, err = monitor.communicate(timeout=20)
    assert monitor.returncode == 130, err  # interrupted, as any command by Ctrl-C
    assert err.splitlines()[-1] == "wfm: interrupted" and "Traceback" not in err
    assert "PAYROLL  g-w" in out and "SUCCESS" in out and "JobA" in out  # the last table, as text
