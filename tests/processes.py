"""Real ``wfm broker`` processes on loopback ports, for end-to-end tests."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.client import BlockingClient, ConnectError
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.transport.harness import Request, ScriptedBroker, free_port, run
from wfm.up import Child, Processes

WFM = str(Path(sys.executable).with_name("wfm"))


@contextmanager
def brokers(
    links: dict[str, list[str]],
    covering: str = "off",
    heartbeat: float = 0.2,
    session_grace: float = 0.0,
    certs: Path | None = None,
    routing: str = "filter",
) -> Iterator[dict[str, BrokerURI]]:
    """Start one ``wfm broker`` per key; ``links[b]`` are the neighbours ``b`` dials. Waits until
    every broker sees all its neighbours, and stops them all (checking they exit cleanly). A
    client that leaves is withdrawn at once unless ``session_grace`` says otherwise. With
    ``certs`` (the ``certs`` fixture's), every link is TLS, each broker the identity of its name."""
    uris = {name: BrokerURI("127.0.0.1", free_port(), name) for name in links}
    procs = {
        name: subprocess.Popen(
            [
                WFM,
                "broker",
                "--uri",
                str(uris[name]),
                "--covering",
                covering,
                "--routing",
                routing,
                "--heartbeat",
                str(heartbeat),
                "--session-grace",
                str(session_grace),
                "--memory",  # what these tests look at is routing, not what a restart keeps
                *[arg for n in links[name] for arg in ("--neighbor", str(uris[n]))],
                *(["--tls", str(certs), "--identity", name] if certs else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in links
    }
    expected = {name: set(links[name]) for name in links}
    for name, neighbours in links.items():
        for n in neighbours:
            expected[n].add(name)
    try:
        for name in links:
            wait_for(lambda n=name: _linked(uris[n], expected[n], watcher(certs)), f"{name} linked")
        yield uris
    finally:
        for proc in procs.values():
            proc.terminate()
        # every broker's pipe read and closed before any is judged: a failed assertion must not
        # leave the others' pipes to the garbage collector (a ResourceWarning in a later test)
        errors = {name: proc.communicate(timeout=10)[1] for name, proc in procs.items()}
        for name, proc in procs.items():
            assert proc.returncode == 0, f"{name} exited with {proc.returncode}: {errors[name][-2000:]}"
            assert "Traceback" not in errors[name], errors[name]


def _linked(uri: BrokerURI, neighbours: set[str], tls: Identity | None) -> bool:
    report = status(uri, tls)
    return report.get("id") == uri.id and set(report["neighbors"]) == neighbours  # type: ignore[arg-type]


def watcher(certs: Path | None) -> Identity | None:
    """The identity tests look at TLS brokers as (None for plain brokers)."""
    return None if certs is None else Identity(certs, "monitor")


def status(uri: BrokerURI, tls: Identity | None = None) -> dict[str, object]:
    try:
        with BlockingClient(uri, timeout=5, tls=tls) as client:
            return client.status()
    except (ConnectError, OSError, TimeoutError):
        return {}


def handling(process: subprocess.Popen[str], sig: int, timeout: float = 60.0) -> None:
    """Until ``process`` has a handler for ``sig`` (its ``SigCgt`` in /proc, Linux): a signal
    sent before then would kill it (a Python command takes seconds to start on a busy machine)."""
    status = Path(f"/proc/{process.pid}/status")

    def caught() -> bool:
        try:
            lines = status.read_text().splitlines()
        except OSError:  # it ended: the test's own checks say how
            return True
        mask = next((int(line.split()[1], 16) for line in lines if line.startswith("SigCgt:")), 0)
        return process.poll() is not None or bool(mask & 1 << (sig - 1))

    wait_for(caught, f"process {process.pid} to handle signal {sig}", timeout)


def wait_for(condition: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def quiet(uris: dict[str, BrokerURI], pause: float = 0.1, tls: Identity | None = None) -> None:
    """Until no broker's message counters move between two looks: routing has settled."""

    routing = (
        "in.Advertise",
        "in.Unadvertise",
        "in.Subscribe",
        "in.CompositeSubscribe",
        "in.Unsubscribe",
        "in.Publish",
        "in.Notify",
    )

    def snapshot() -> list[object]:  # the look itself (a status client) must not count
        counters = [status(u, tls).get("counters", {}) for u in uris.values()]
        return [{k: c.get(k) for k in routing} for c in counters]  # type: ignore[attr-defined]

    before = snapshot()
    for _ in range(100):
        time.sleep(pause)
        after = snapshot()
        if after == before:
            return
        before = after
    raise AssertionError("the overlay did not settle")


def against_scripted_broker(
    refuse: Callable[[int, Request], str | None], *argv: str
) -> tuple[int | None, str]:
    """Run ``wfm ARGV --broker URI`` until it exits, against a :class:`ScriptedBroker` that
    refuses what ``refuse`` says: its exit status and stderr."""

    async def scenario() -> tuple[int | None, str]:
        async with ScriptedBroker(refuse) as broker:
            process = await asyncio.create_subprocess_exec(
                WFM, *argv, "--broker", str(broker.uri), stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(process.communicate(), 30)
            return process.returncode, err.decode()

    return run(scenario(), timeout=40)


def signal_child(processes: Processes, child: Child, sig: signal.Signals) -> None:
    """Send ``sig`` to ``child``, one of ``processes``; killed (SIGKILL), it is waited for and
    forgotten, so that it can be started again."""
    process = next(p for c, p in processes.running if c is child)
    process.send_signal(sig)
    if sig == signal.SIGKILL:
        process.wait()
        processes.running.remove((child, process))
