"""``wfm broker``, ``wfm status`` and ``wfm client`` as separate processes, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests.processes import WFM, brokers


def wfm(*args: str, stdin: str = "", timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WFM, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def listening_client(uri: object, client_id: str, first_line: str) -> subprocess.Popen[str]:
    """A ``wfm client -o json`` that has applied ``first_line`` and keeps reading stdin."""
    client = subprocess.Popen(
        [WFM, "client", "--broker", str(uri), "--id", client_id, "-o", "json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert client.stdin is not None
    client.stdin.write(first_line + "\n")
    client.stdin.flush()
    time.sleep(0.5)
    return client


def test_clients_through_two_brokers() -> None:
    with brokers({"B1": [], "B2": ["B1"]}) as uris:
        sub = listening_client(uris["B2"], "sub", "s [class,eq,'stock'],[price,<,100]")
        pub = wfm(
            "client",
            "--broker",
            str(uris["B1"]),
            "--id",
            "pub",
            "--linger",
            "0",
            stdin="a [class,eq,'stock'],[price,<,100],[amount,>,100]\n"
            "sleep 0.3\n"
            "p [class,'stock'],[price,80]\n"
            "p [class,'stock'],[price,120]\n"
            "x what\n"
            "p [class,'stock'],[price,70] priority=9 ttl=30s id=alert-7\n"
            "p [class,'stock'],[price,60] ttl=soon\n"
            "p [class,'stock'],[price,50] priority=high\n",
        )
        assert pub.returncode == 1  # four lines failed, the others were applied
        errors = pub.stderr.strip().splitlines()
        assert errors[0] == "adv B1/pub/1"
        assert "fits no advertisement" in errors[1] and "unknown command 'x'" in errors[2]
        assert errors[3].endswith("'soon' is not a duration: give a number with ms, s, m, h or d (30s, 5m)")
        assert errors[4].endswith("priority must be 0 to 9, not 'high'")
        out, err = sub.communicate("sleep 0.5\n", timeout=20)
        assert sub.returncode == 0, err
        assert err.strip() == "sub B2/sub/1"
        got = [json.loads(line) for line in out.splitlines()]
        expires = got[-1].pop("expires")
        assert got == [
            {
                "subscription": "B2/sub/1",
                "publication": "[class,stock],[price,80]",
                "attributes": {"class": "stock", "price": 80},
                "priority": 4,
            },
            {
                "subscription": "B2/sub/1",
                "publication": "[class,stock],[price,70]",
                "attributes": {"class": "stock", "price": 70},
                "priority": 9,
                "id": "alert-7",
            },
        ]
        assert 0 < expires - time.time() <= 30
        status = json.loads(wfm("status", "--broker", str(uris["B1"]), "-o", "json").stdout)
        assert status["id"] == "B1" and status["uri"] == str(uris["B1"]) and status["neighbors"] == ["B2"]
        assert status["subscriptions"] == 0 and status["advertisements"] == 0  # both clients left


def test_a_broker_started_flooding_says_so_in_its_status() -> None:
    with brokers({"B1": []}, routing="flooding") as uris:
        shown = wfm("status", "--broker", str(uris["B1"])).stdout.splitlines()
        assert f"{'routing':24} flooding" in shown
        report = json.loads(wfm("status", "--broker", str(uris["B1"]), "-o", "json").stdout)
        assert report["routing"] == "flooding"


def test_environment_variable_names_the_broker() -> None:
    with brokers({"B1": []}) as uris:
        done = subprocess.run(
            [WFM, "status", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"WFM_BROKER": str(uris["B1"]), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["id"] == "B1"


def test_a_broker_list_fails_over_to_one_that_answers() -> None:
    with brokers({"B1": []}) as uris:
        listed = f"socket://127.0.0.1:1/B9,{uris['B1']}"
        done = subprocess.run(
            [WFM, "status", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            env={
                "WFM_BROKER": listed,
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            },
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["id"] == "B1"
        text = wfm("status", "--broker", listed).stdout
        assert "dropped" in text  # the broker's drop counters, "none" while nothing was lost


def test_errors_are_one_line() -> None:
    cases = [
        (("status", "--broker", "http://x"), "is not a broker URI"),
        (("status", "--broker", "socket://127.0.0.1:1/B1,x"), "'x' is not a broker URI"),
        (("status", "--broker", "socket://127.0.0.1:1/B1"), "cannot connect"),
        (("broker", "--uri", "socket://127.0.0.1:70000/B1"), "out of range"),
        (
            ("broker", "--uri", "socket://127.0.0.1:7/B1", "--neighbor", "socket://127.0.0.1:8/B1"),
            "own neighbour",
        ),
        (("client", "--broker", "socket://127.0.0.1:1/B1"), "cannot connect"),
    ]
    for args, fragment in cases:
        done = wfm(*args)
        assert done.returncode != 0, args
        assert fragment in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_busy_port_is_a_clear_error() -> None:
    with brokers({"B1": []}) as uris:
        done = wfm("broker", "--uri", str(uris["B1"]), "--memory")
        assert done.returncode == 1
        assert done.stderr.strip().endswith(f"cannot listen on {uris['B1']}: address already in use")


def test_composite_subscription_from_the_command_line() -> None:
    with brokers({"B1": [], "B2": ["B1"]}) as uris:
        sub = listening_client(
            uris["B2"], "agent", "cs {{[class,eq,a],[g,eq,$S$G]}&{[class,eq,b],[g,eq,$S$G]}}"
        )
        pub = wfm(
            "client",
            "--broker",
            str(uris["B1"]),
            "--linger",
            "0",
            stdin="a [class,eq,a],[g,isPresent,'']\na [class,eq,b],[g,isPresent,'']\nsleep 0.3\n"
            "p [class,a],[g,one]\np [class,b],[g,two]\np [class,b],[g,one]\n",
        )
        assert pub.returncode == 0, pub.stderr
        out, err = sub.communicate("sleep 0.5\n", timeout=20)
        assert err.strip() == "sub B2/agent/1"
        assert [json.loads(line) for line in out.splitlines()] == [
            {
                "subscription": "B2/agent/1",
                "publications": [
                    {"publication": "[class,a],[g,one]", "attributes": {"class": "a", "g": "one"}},
                    {"publication": "[class,b],[g,one]", "attributes": {"class": "b", "g": "one"}},
                ],
            }
        ]


def test_a_client_pulls_what_it_asks_for_and_the_broker_keeps_the_rest() -> None:
    """``pull N`` in ``wfm client``: N deliveries, then none until asked (the broker keeps them);
    ``push`` has the rest pushed. Nothing lost, nothing twice, in order."""
    with brokers({"B1": [], "B2": ["B1"]}) as uris:
        sub = listening_client(uris["B2"], "sub", "s [class,eq,'tick']")
        assert sub.stdin is not None and sub.stdout is not None
        sub.stdin.write("pull 2\n")
        sub.stdin.flush()
        lines = "".join(f"p [class,'tick'],[n,{n}]\n" for n in range(5))
        pub = wfm(
            "client",
            "--broker",
            str(uris["B1"]),
            "--linger",
            "0",
            stdin=f"a [class,eq,'tick'],[n,>,-1]\nsleep 0.3\n{lines}",
        )
        assert pub.returncode == 0, pub.stderr

        def took() -> list[int]:
            return [json.loads(sub.stdout.readline())["attributes"]["n"]]  # type: ignore[union-attr]

        assert took() + took() == [0, 1]
        status = json.loads(wfm("status", "--broker", str(uris["B2"]), "-o", "json").stdout)
        assert status["waiting"] == 3  # kept for the subscriber until it asks
        sub.stdin.write("pull 1\n")
        sub.stdin.flush()
        assert took() == [2]
        out, err = sub.communicate("sleep 0.5\npush\nsleep 0.5\n", timeout=20)
        assert sub.returncode == 0, err
        assert [json.loads(line)["attributes"]["n"] for line in out.splitlines()] == [3, 4]
