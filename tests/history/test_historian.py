"""``wfm historian`` and ``wfm history --broker`` as processes over two real brokers (B1 - B2).

One historian (on B2) serves the whole module, so Spark starts once in it; its first query, made
before any publication, is the zero-result case. The two-historian test adds a second one (on B1),
whose first query starts Spark too. The kill -9 test runs its own historian, which never starts
Spark (landing needs none)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.client import BlockingClient
from broker.language import parse_publication
from broker.transport.uri import BrokerURI
from tests.processes import WFM, against_scripted_broker, brokers, status, wait_for
from tests.transport.harness import free_port
from wfm.history.landing import Landing, read_landing, segments
from wfm.history.protocol import (
    attributed,
    final_publication,
    parse_answer,
    query_advertisement,
    result_subscription,
)

KEEP = ["--keep", "JOBSTATUS", "--keep", "SEAM"]


def start_historian(uri: BrokerURI, store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [WFM, "historian", "--broker", str(uri), "--store", str(store), *KEEP, "--compact-every", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err, err
    return err


def landed(store: Path) -> list[tuple[str, float, str, str]]:
    rows = read_landing(segments(store / "landing"))
    return [(s.id, s.time, s.publisher, str(s.publication)) for s in rows]


def subscribed(client: BlockingClient, store: Path) -> None:
    """Publish probes until a new one lands in ``store``: the historian's subscriptions have reached
    the publisher's broker (a sleep after starting it was not always enough on a loaded machine)."""
    probes = lambda: sum("[note,probe]" in row[3] for row in landed(store))  # noqa: E731
    before = probes()

    def landed_one() -> bool:
        client.publish("[class,JOBSTATUS],[n,-1],[note,probe]")
        return probes() > before

    wait_for(landed_one, f"the historian of {store} subscribed", 30)


def wfm(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([WFM, *argv], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def overlay() -> Iterator[dict[str, BrokerURI]]:
    with brokers({"B1": [], "B2": ["B1"]}, heartbeat=1.0) as uris:
        yield uris


@pytest.fixture(scope="module")
def historian(overlay: dict[str, BrokerURI], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    store = tmp_path_factory.mktemp("historian")
    process = start_historian(overlay["B2"], store)
    time.sleep(1.0)  # its subscriptions reach B1
    # the first query starts the historian's Spark (it accepts at once, so the default timeout
    # does); wait for it once here; it has no results
    warm = wfm("history", "[class,eq,JOBSTATUS]", "--broker", str(overlay["B1"]), "-o", "json")
    assert warm.returncode == 0 and warm.stdout == "", warm.stderr
    yield store
    stop(process)


def publisher(uri: BrokerURI, name: str, cls: str) -> BlockingClient:
    client = BlockingClient(uri, name)
    client.advertise(f"[class,eq,{cls}],[n,isPresent,0],[note,isPresent,'']")
    time.sleep(0.5)  # the historian's subscription travels towards the new advertisement
    return client


def test_lands_deliveries_with_publisher_id_and_time(overlay: dict[str, BrokerURI], historian: Path) -> None:
    before = time.time()
    with publisher(overlay["B1"], "pub-land", "JOBSTATUS") as client:
        ids = [client.publish(f'[class,JOBSTATUS],[n,{n}],[note,"it\'s"]') for n in range(20)]
    wait_for(lambda: {row[0] for row in landed(historian)} >= set(ids), "all 20 landed", 10)
    rows = {row[0]: row for row in landed(historian)}
    for n, id in enumerate(ids):
        _, at, who, text = rows[id]
        assert who == "pub-land" and id.split("/")[0] == "B1"
        assert before <= at <= time.time()
        assert text == f'[class,JOBSTATUS],[n,{n}],[note,"it\'s"]'


def test_history_through_the_overlay(overlay: dict[str, BrokerURI], historian: Path) -> None:
    with publisher(overlay["B1"], "pub-query", "JOBSTATUS") as client:
        ids = [client.publish(f"[class,JOBSTATUS],[n,{n}],[note,'a\"b']") for n in range(5)]
    wait_for(lambda: {row[0] for row in landed(historian)} >= set(ids), "landed", 10)
    done = wfm(
        "history",
        "[class,eq,JOBSTATUS],[n,<,5],[time,>,now-1h]",
        "--broker",
        str(overlay["B1"]),
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    ours = [line for line in lines if line["attributes"]["note"] == 'a"b']
    assert [line["attributes"]["n"] for line in ours] == list(range(5))
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)
    assert {line["subscription"] for line in lines} == {lines[0]["subscription"]}
    assert ours[0]["publication"] == "[class,JOBSTATUS],[n,0],[note,'a\"b']"


def test_composite_history_through_the_overlay(overlay: dict[str, BrokerURI], historian: Path) -> None:
    """Each atom is asked as a filter and the answers are joined by the asker, in time order."""
    with publisher(overlay["B1"], "pub-join", "JOBSTATUS") as client:
        sides = [("left", n) for n in (1, 2, 3)] + [("right", n) for n in (2, 3, 3, 4)]
        ids = [client.publish(f"[class,JOBSTATUS],[n,{100 + n}],[note,{side}]") for side, n in sides]
    wait_for(lambda: {row[0] for row in landed(historian)} >= set(ids), "landed", 10)
    composite = (
        "{{[class,eq,JOBSTATUS],[note,eq,left],[n,=,$I$N]}&{[class,eq,JOBSTATUS],[note,eq,right],[n,=,$I$N]}}"
    )
    done = wfm("history", composite, "--broker", str(overlay["B1"]), "--since", "now-1h", "-o", "json")
    assert done.returncode == 0, done.stderr
    groups = [json.loads(line)["publications"] for line in done.stdout.splitlines()]
    assert [[(p["attributes"]["note"], p["attributes"]["n"]) for p in group] for group in groups] == [
        [("left", 102), ("right", 102)],
        [("left", 103), ("right", 103)],
        [("left", 103), ("right", 103)],
    ]
    assert groups[1][1]["time"] < groups[2][1]["time"]  # the two rights of 103, in time order
    text = wfm("history", composite, "--broker", str(overlay["B1"]))
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 3 and "  &  " in text.stdout
    live = wfm("history", composite, "--broker", str(overlay["B1"]), "--until", "now+1m")
    assert live.returncode != 0 and live.stdout == ""
    assert live.stderr.strip() == (
        "wfm: error: a composite historic query covers the past only: it cannot end later than now"
    )


def test_historian_reports_a_bad_query(overlay: dict[str, BrokerURI], historian: Path) -> None:
    with BlockingClient(overlay["B1"], "asker") as client:
        client.subscribe(result_subscription("q-bad"))
        client.advertise(query_advertisement())
        time.sleep(0.5)
        client.publish("[class,HISTORY_QUERY],[query,'q-bad'],[filter,'\"[class,eq,X],[n,OK]\"']")
        delivery = client.receive(timeout=20)
    assert delivery is not None
    answer = parse_answer(delivery.publication)
    assert answer.last and answer.count == 0 and answer.error.startswith("invalid filter:")
    expected = attributed(final_publication("q-bad", 0, answer.error), answer.historian, "")
    assert delivery.publication == expected


def test_no_historian_is_one_line() -> None:
    with brokers({"X": []}, heartbeat=1.0) as alone:
        done = wfm("history", "[class,eq,JOBSTATUS]", "--broker", str(alone["X"]), "--timeout", "1")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["wfm: error: no historian answered within 1 s"]


def test_seam_between_history_and_live(overlay: dict[str, BrokerURI], historian: Path) -> None:
    """Publications before the query come from history, those during and after it live, each once."""
    sent: list[int] = []
    stopping = threading.Event()
    with publisher(overlay["B1"], "pub-seam", "SEAM") as client:

        def stream() -> None:
            n = 0
            while not stopping.is_set():
                client.publish(f"[class,SEAM],[n,{n}],[note,seam]")
                sent.append(n)
                n += 1
                time.sleep(0.02)

        thread = threading.Thread(target=stream)
        thread.start()
        try:
            time.sleep(1.5)
            asker = subprocess.Popen(
                [
                    WFM,
                    "history",
                    "[class,eq,SEAM]",
                    "--broker",
                    str(overlay["B2"]),
                    "--until",
                    "now+6s",
                    "-o",
                    "json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            time.sleep(4.0)  # the answer arrives and live delivery takes over while the stream goes on
        finally:
            stopping.set()
            thread.join()
        out, err = asker.communicate(timeout=30)
    assert asker.returncode == 0 and "Traceback" not in err, err
    shown = [json.loads(line)["attributes"]["n"] for line in out.splitlines()]
    assert sorted(shown) == sent, (len(shown), len(sent))
    assert shown == sent  # history in time order, then live in order: the stream's own order


def test_two_historians_answer_as_one(overlay: dict[str, BrokerURI], historian: Path, tmp_path: Path) -> None:
    """A second historian (on B1, its own store) starts after some publications and holds some of
    its own; one query shows each publication once, in time order, from both. Its first query starts
    Spark, so it answers long after the module's historian: the asker waits for it because it has
    accepted."""
    second_store = tmp_path / "second"
    with publisher(overlay["B1"], "pub-two", "JOBSTATUS") as client:
        before = [client.publish(f"[class,JOBSTATUS],[n,{n}],[note,two]") for n in range(3)]
        wait_for(lambda: {row[0] for row in landed(historian)} >= set(before), "landed by the first", 10)
        times = sorted(row[1] for row in landed(historian) if row[0] in before)
        # only the second one has these: landed between the first ones, from elsewhere
        with Landing(second_store / "landing") as landing:
            for n, at in enumerate([(times[0] + times[1]) / 2, (times[1] + times[2]) / 2, times[2] + 0.001]):
                text = f"[class,JOBSTATUS],[n,{10 + n}],[note,two]"
                landing.append(parse_publication(text), at, "elsewhere", f"B9/elsewhere/{n}")
        second = start_historian(overlay["B1"], second_store)
        try:
            subscribed(client, second_store)  # and so its query subscription is in place too
            both = [client.publish(f"[class,JOBSTATUS],[n,{n}],[note,two]") for n in range(3, 6)]
            for store in (historian, second_store):
                wait_for(lambda s=store: {row[0] for row in landed(s)} >= set(both), f"landed in {store}", 10)
            assert not set(before) & {row[0] for row in landed(second_store)}
            done = wfm(
                "history", "[class,eq,JOBSTATUS],[note,eq,two]", "--broker", str(overlay["B2"]), "-o", "json"
            )
        finally:
            stop(second)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["attributes"]["n"] for line in lines] == [0, 10, 1, 11, 2, 12, 3, 4, 5]
    assert [line["time"] for line in lines] == sorted(line["time"] for line in lines)


def test_kill_9_loses_nothing_durable(overlay: dict[str, BrokerURI], tmp_path: Path) -> None:
    store = tmp_path / "store"
    process = start_historian(overlay["B1"], store)
    with publisher(overlay["B2"], "pub-kill", "JOBSTATUS") as client:
        subscribed(client, store)
        first = [client.publish(f"[class,JOBSTATUS],[n,{n}],[note,k]") for n in range(50)]
        wait_for(lambda: {row[0] for row in landed(store)} >= set(first), "first batch durable", 10)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)  # reaps it and closes its stderr pipe
        durable = landed(store)
        # a restarted historian that lands the same deliveries again (as one would after an
        # unacknowledged batch): a copy of the killed one's segment
        for path in segments(store / "landing"):
            shutil.copy(path, path.with_name("9" + path.name[1:]))
        process = start_historian(overlay["B1"], store)
        subscribed(client, store)
        second = [client.publish(f"[class,JOBSTATUS],[n,{n}],[note,k]") for n in range(50, 60)]
        wait_for(lambda: {row[0] for row in landed(store)} >= set(second), "second batch durable", 10)
    stop(process)
    after = landed(store)
    assert after[: len(durable)] == durable  # nothing fsync'd is lost
    assert len({row[0] for row in after}) == len(after)  # each id once
    assert len([row for row in after if row[3].endswith("[note,k]")]) == 60
    done = wfm("history", "[class,eq,JOBSTATUS],[note,eq,k]", "--store", str(store), "-o", "json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["attributes"]["n"] for line in done.stdout.splitlines()] == list(range(60))


def test_reconnects_after_a_broker_restart(tmp_path: Path) -> None:
    uri = BrokerURI("127.0.0.1", free_port(), "R")

    def broker() -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [WFM, "broker", "--uri", str(uri), "--memory"], stderr=subprocess.DEVNULL, text=True
        )
        wait_for(lambda: status(uri).get("id") == "R", "broker up")
        return process

    first = broker()
    historian = start_historian(uri, tmp_path)
    try:
        wait_for(lambda: status(uri).get("subscriptions", 0) >= 3, "historian subscribed")  # type: ignore[operator]
        first.terminate()
        first.wait(10)
        second = broker()
        try:
            wait_for(lambda: status(uri).get("subscriptions", 0) >= 3, "historian back")  # type: ignore[operator]
            with publisher(uri, "pub-again", "SEAM") as client:
                id = client.publish("[class,SEAM],[n,1],[note,again]")
            wait_for(lambda: id in {row[0] for row in landed(tmp_path)}, "landed after the restart", 10)
        finally:
            stop(historian)
            second.terminate()
            second.wait(10)
    finally:
        if historian.poll() is None:
            historian.kill()
            historian.communicate(timeout=30)


def test_wfm_historian_exits_with_a_clear_error_if_its_subscriptions_are_refused(tmp_path: Path) -> None:
    argv = ("historian", "--store", str(tmp_path / "store"), *KEEP, "--compact-every", "0")
    code, err = against_scripted_broker(lambda connection, request: "no room", *argv)
    assert code == 1 and err == "wfm: error: broker B1 refused historian historian's requests: no room\n"


def test_monitor_catches_up_with_a_generation_that_ended_before_it_started(
    overlay: dict[str, BrokerURI], historian: Path
) -> None:
    """``wfm trigger`` then ``wfm monitor --gid``: the historians' past, then live (issue 16)."""
    with BlockingClient(overlay["B1"], "coordinator") as client:
        client.advertise(
            "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,isPresent,''],[GID,isPresent,''],"
            "[status,isPresent,''],[detail,isPresent,'']"
        )
        time.sleep(0.5)  # the historian's subscription travels towards the new advertisement
        ids = [
            client.publish(
                f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,{job}],[GID,g-past],[status,SUCCESS],[detail,'']"
            )
            for job in ("APPL_START", "JobA", "APPL_END")
        ]
    wait_for(lambda: {row[0] for row in landed(historian)} >= set(ids), "landed", 10)
    done = wfm(
        "monitor",
        "PAYROLL",
        "--gid",
        "g-past",
        "-o",
        "json",
        "--timeout",
        "60",
        "--broker",
        str(overlay["B1"]),
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["job"] for line in done.stdout.splitlines()] == [
        "APPL_START",
        "JobA",
        "APPL_END",
    ]
