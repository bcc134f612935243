"""Chaos tests: ``wfm puppet`` scripts of faults against real brokers, publishers and subscribers,
checked like Jepsen and the NATS chaos tests (sequence numbers in the payloads; nothing lost,
nothing twice). Select them with ``-m chaos``. Faults that only broker custody can survive
(a broker killed or frozen while traffic crosses it) are strict xfails: remove the mark when
custody lands."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wfm.cli.puppet import DEFAULT_TOPOLOGY

pytestmark = pytest.mark.chaos

WFM = [sys.executable, "-m", "wfm.cli"]

LINE = DEFAULT_TOPOLOGY  # broker0 - broker1 - broker2; publisher0 on broker0, subscriber0 on broker2


class Run:
    """One finished ``wfm puppet -o json`` run: its exit status, log entries and summary."""

    def __init__(self, tmp_path: Path, script: str, topology: str = LINE, suffix: str = ".txt") -> None:
        (tmp_path / "script.txt").write_text(script)
        (tmp_path / f"topology{suffix}").write_text(topology)
        self.home = tmp_path / "run"
        argv = [
            *WFM,
            "puppet",
            str(tmp_path / "script.txt"),
            "--topology",
            str(tmp_path / f"topology{suffix}"),
        ]
        argv += ["--dir", str(self.home), "--heartbeat", "0.2", "--settle", "0.2", "-o", "json"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        self.returncode, self.stderr = done.returncode, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        objects = [json.loads(line) for line in done.stdout.splitlines()]
        assert objects and "summary" in objects[-1], done.stdout[-2000:] + done.stderr[-2000:]
        self.entries, self.summary = objects[:-1], objects[-1]["summary"]
        assert strays(self.home) == []

    def pairs(self) -> dict[tuple[str, str], dict[str, object]]:
        return {(p["publisher"], p["subscriber"]): p for p in self.summary["pairs"]}

    def seqs(self, event: str, who: str) -> list[int]:
        field = "subscriber" if event == "SubEvent" else "publisher"
        return [e["seq"] for e in self.entries if e["event"] == event and e[field] == who]

    def at(self, line: str) -> float:
        return next(e["t"] for e in self.entries if e["line"] == line)


def strays(home: Path) -> list[int]:
    """Processes still running that the puppet started for the run in ``home``."""
    mark = f"WFM_PUPPET={home}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_no_fault_nothing_lost(tmp_path: Path) -> None:
    toml = """\
site = [{name = "s0", parent = "none"}, {name = "s1", parent = "s0"}]
process = [
  {name = "b0", is = "broker", on = "s0", url = "tcp://127.0.0.1:0/broker"},
  {name = "b1", is = "broker", on = "s1", url = "tcp://127.0.0.1:0/broker"},
  {name = "p0", is = "publisher", on = "s0", url = "tcp://127.0.0.1:0/pub"},
  {name = "p1", is = "publisher", on = "s1", url = "tcp://127.0.0.1:0/pub"},
  {name = "s0sub", is = "subscriber", on = "s0", url = "tcp://127.0.0.1:0/sub"},
  {name = "s1sub", is = "subscriber", on = "s1", url = "tcp://127.0.0.1:0/sub"},
]
"""
    script = """\
Subscriber s0sub Subscribe /news/*
Subscriber s1sub Subscribe /news/sport
Wait 200
Publisher p0 Publish 40 Ontopic /news/sport Interval 2
Publisher p1 Publish 40 Ontopic /news/sport Interval 2
Publisher p1 Publish 10 Ontopic /news/weather Interval 2
Status
"""
    run = Run(tmp_path, script, toml, ".toml")
    assert run.returncode == 0, run.stderr
    assert run.summary["lost"] == run.summary["duplicated"] == run.summary["out_of_order"] == 0
    counts = {pair: (p["expected"], p["received"]) for pair, p in run.pairs().items()}
    assert counts == {
        ("p0", "s0sub"): (40, 40),
        ("p0", "s1sub"): (40, 40),
        ("p1", "s0sub"): (50, 50),
        ("p1", "s1sub"): (40, 40),  # not the weather
    }
    assert [e["t"] for e in run.entries] == sorted(e["t"] for e in run.entries)
    assert any(e["line"].startswith("Status b1: neighbors ['b0']") for e in run.entries)


def test_subscriber_killed_gets_what_it_missed_after_a_restart(tmp_path: Path) -> None:
    """kill -9 of a subscriber: its broker keeps its session and queues; the restarted process
    (same name, same state directory) gets everything published while it was away."""
    script = """\
Subscriber subscriber0 Subscribe /a/*
Wait 300
Publisher publisher0 Publish 10 Ontopic /a/b Interval 5
Wait 400
Crash subscriber0
Publisher publisher0 Publish 10 Ontopic /a/c Interval 5
Wait 400
Restart subscriber0
Publisher publisher0 Publish 10 Ontopic /a/b Interval 5
"""
    run = Run(tmp_path, script)
    assert run.returncode == 0, run.stderr
    assert run.pairs()["publisher0", "subscriber0"]["received"] == 30
    restarted = run.at("Restart subscriber0")
    missed = [e for e in run.entries if e["event"] == "SubEvent" and e["topic"] == "/a/c"]
    assert len(missed) == 10 and all(e["t"] > restarted for e in missed)


def test_publisher_killed_and_restarted_never_reuses_a_number(tmp_path: Path) -> None:
    script = """\
Subscriber subscriber0 Subscribe /a/b
Publisher publisher0 Publish 200 Ontopic /a/b Interval 2
Wait 150
Crash publisher0
Restart publisher0
Publisher publisher0 Publish 10 Ontopic /a/b Interval 2
"""
    run = Run(tmp_path, script)
    assert run.returncode == 0, run.stderr
    published = run.seqs("PubEvent", "publisher0")
    assert len(published) == len(set(published)) and published == sorted(published)
    assert 10 < len(published) < 210  # the first order was cut short by the crash
    assert run.seqs("SubEvent", "subscriber0")[-10:] == published[-10:]


FREEZE = """\
Subscriber subscriber0 Subscribe /a/*
Wait 300
Publisher publisher0 Publish 10 Ontopic /a/b Interval 5
Wait 300
Freeze broker2
{during}
Wait 1500
Status
Unfreeze broker2
Wait 1500
Publisher publisher0 Publish 10 Ontopic /a/b Interval 5
"""


def test_broker_frozen_past_the_heartbeat_timeout_recovers(tmp_path: Path) -> None:
    """SIGSTOP of the subscriber's broker for 1.5 s (its links die after 0.8 s), then SIGCONT:
    the overlay links again and routes again; nothing published outside the freeze is lost."""
    run = Run(tmp_path, FREEZE.format(during=""))
    assert run.returncode == 0, run.stderr
    status = next(e["line"] for e in run.entries if e["line"].startswith("Status broker1:"))
    assert status.startswith("Status broker1: neighbors ['broker0'],"), (
        "the freeze did not outlast the heartbeat"
    )
    assert run.pairs()["publisher0", "subscriber0"]["received"] == 20


def test_broker_frozen_while_publishing(tmp_path: Path) -> None:
    run = Run(tmp_path, FREEZE.format(during="Publisher publisher0 Publish 20 Ontopic /a/b Interval 20"))
    assert run.summary["lost"] == 0 and run.returncode == 0


@pytest.mark.parametrize("broker", ["broker1", "broker0"], ids=["middle", "publisher's edge"])
def test_broker_killed_and_restarted(tmp_path: Path, broker: str) -> None:
    script = f"""\
Subscriber subscriber0 Subscribe /a/*
Publisher publisher0 Publish 60 Ontopic /a/b Interval 20
Wait 300
Crash {broker}
Wait 300
Restart {broker}
"""
    run = Run(tmp_path, script)
    assert run.summary["lost"] == 0 and run.returncode == 0


def test_interrupted_run_leaves_no_process(tmp_path: Path) -> None:
    (tmp_path / "script.txt").write_text("Subscriber subscriber0 Subscribe /a\nFreeze broker1\nWait 60000\n")
    (tmp_path / "topology.txt").write_text(LINE)
    home = tmp_path / "run"
    argv = [*WFM, "puppet", str(tmp_path / "script.txt"), "--topology", str(tmp_path / "topology.txt")]
    with subprocess.Popen(
        [*argv, "--dir", str(home)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as puppet:
        try:
            assert puppet.stdout is not None
            while "Wait 60000" not in puppet.stdout.readline():
                assert puppet.poll() is None
            assert len(strays(home)) == 6
            puppet.send_signal(signal.SIGINT)
            assert puppet.wait(timeout=15) == 130
        finally:
            if puppet.poll() is None:
                puppet.kill()
    deadline = time.monotonic() + 5
    while strays(home) and time.monotonic() < deadline:  # reparented children are reaped by init
        time.sleep(0.05)
    assert strays(home) == []


def test_a_bad_script_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("Wait 10\nCrash nobody\n")
    argv = [*WFM, "puppet", str(tmp_path / "s.txt"), "--dir", str(tmp_path / "run")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip() == f"wfm: error: {tmp_path / 's.txt'}:2: no process 'nobody' in <default>"
    assert not (tmp_path / "run").exists()  # no process was started: none wrote a log


SITES = "\n".join(
    [
        "Site site0 Parent none",
        "Site site1 Parent site0",
        "Site site2 Parent site0",
        *(f"Process s{s}{m} Is broker On site{s} URL tcp://127.0.0.1:0/b" for s in range(3) for m in "abc"),
        "Process publisher0 Is publisher On site1 URL tcp://127.0.0.1:0/p",
        "Process subscriber0 Is subscriber On site2 URL tcp://127.0.0.1:0/s",
        "RoutingPolicy filter",
        "Ordering FIFO",
    ]
)
SITE_BROKERS = [f"s{s}{m}" for s in range(3) for m in "abc"]


def test_each_broker_of_each_site_killed_in_turn_loses_repeats_and_reorders_nothing(tmp_path: Path) -> None:
    """Three sites of three brokers; the publisher on site1, the subscriber on site2, so every
    publication crosses the root site. Every broker is killed -9 in turn while the stream runs
    (each site's leader among them, whichever it is then) and restarted from its log."""
    faults = "".join(f"Crash {b}\nWait 400\nRestart {b}\nWait 200\n" for b in SITE_BROKERS)
    start = "Subscriber subscriber0 Subscribe /a/*\nWait 500\n"  # known at the publisher's site first
    script = f"{start}Publisher publisher0 Publish 200 Ontopic /a/b Interval 20\n{faults}Wait 1000\n"
    run = Run(tmp_path, script, SITES)
    assert run.returncode == 0, (run.summary, run.stderr[-3000:])
    pair = run.pairs()["publisher0", "subscriber0"]
    assert (pair["received"], run.summary["lost"]) == (200, 0), pair


def test_site_leaders_killed_two_at_once_and_frozen_past_the_heartbeat_timeout(tmp_path: Path) -> None:
    """A site's name in a script is its leader at the time: the root's leader frozen for 1.5 s
    (its site elects another, and it wakes up fenced), then the leaders of the publisher's and
    the subscriber's sites killed at once, then the root's leader killed."""
    script = """\
Subscriber subscriber0 Subscribe /a/*
Wait 500
Publisher publisher0 Publish 150 Ontopic /a/b Interval 20
Freeze site0
Wait 1500
Unfreeze site0
Wait 300
Crash site1
Crash site2
Wait 400
Restart site1
Restart site2
Wait 300
Crash site0
Wait 400
Restart site0
Wait 1000
"""
    run = Run(tmp_path, script, SITES)
    assert run.returncode == 0, (run.summary, run.stderr[-3000:])
    leaders = [e["line"] for e in run.entries if e["line"].startswith("Leader ")]
    assert [line.split()[1] for line in leaders] == ["site0", "site1", "site2", "site0"]
    pair = run.pairs()["publisher0", "subscriber0"]
    assert (pair["received"], run.summary["lost"]) == (150, 0), pair


def test_total_order_survives_the_loss_of_the_broker_that_orders(tmp_path: Path) -> None:
    """Ordering TOTAL on three sites of three: a publisher and a subscriber on each of site1 and
    site2, so each subscriber is beside one publisher and far from the other. Every publication
    is ordered by the root site's log; its leader, the broker that orders them, is killed while
    both publish. No subscriber sees two publications in another order than the other."""
    topology = SITES.replace("Ordering FIFO", "Ordering TOTAL") + (
        "\nProcess publisher1 Is publisher On site2 URL tcp://127.0.0.1:0/p"
        "\nProcess subscriber1 Is subscriber On site1 URL tcp://127.0.0.1:0/s\n"
    )
    script = """\
Subscriber subscriber0 Subscribe /a/*
Subscriber subscriber1 Subscribe /a/*
Wait 500
Publisher publisher0 Publish 100 Ontopic /a/b Interval 10
Publisher publisher1 Publish 100 Ontopic /a/c Interval 10
Wait 300
Crash site0
Wait 400
Restart site0
Wait 1500
"""
    run = Run(tmp_path, script, topology)
    assert run.summary["ordering"] == "TOTAL" and run.summary["cycles"] == [], run.summary
    assert run.returncode == 0 and run.summary["lost"] == 0, (run.summary, run.stderr[-3000:])
    assert all(p["received"] == 100 for p in run.summary["pairs"]), run.summary["pairs"]
