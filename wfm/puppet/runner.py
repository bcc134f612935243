"""Running a PuppetMaster script: start the topology's processes, carry out the commands, log
what happens, then check what the subscribers got.

Every process of the topology is a child: brokers (``wfm broker``), agents (``wfm agent``), and
publishers and subscribers (``python -m wfm.puppet.worker``, which take orders on stdin and report
on stdout). Each runs in its own session, so Ctrl-C reaches the puppet only, which then stops
them all (unfrozen first: a stopped process would never see SIGTERM); :meth:`Puppet.close` runs
on every way out. A worker also exits when its stdin ends, so even a puppet killed by SIGKILL
leaves no publisher running.

The log is one list, appended under one lock with the time read under that lock, so it is in
time order: the commands, with the script's syntax, and what the workers report
(``PubEvent``, ``SubEvent`` in SESDAD's format, ``Status``, ``Error``), plus ``Exited NAME
STATUS`` for a process that died without being told to. With the topology's ``LoggingLevel
full``, ``BroEvent`` lines too, from what each broker reports it forwarded (:mod:`.events`).

A script is run by :meth:`Puppet.run`; the console feeds :meth:`Puppet.do` one command at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from broker.client import BlockingClient, ConnectError, NoAnswer
from broker.errors import LocalError
from wfm.puppet.checker import Published, Received, Report, Window, check
from wfm.puppet.events import Traces, bro_event, pub_event, sub_event
from wfm.puppet.script import Command, Publish, Signal, Status, Subscribe, Wait
from wfm.topology import Process, Topology
from wfm.up import WFM, linked

__all__ = ["Entry", "Puppet", "PuppetError", "Settings"]

WORKER = [sys.executable, "-m", "wfm.puppet.worker"]
MARK = "WFM_PUPPET"  # in every child's environment: the run's directory (to find strays, say)
ANSWER = 5.0  # seconds to wait for a worker's acknowledgement of an order before going on
TRACE_POLL = 0.02  # seconds between two looks at the brokers' forwarding traces (LoggingLevel full)


class PuppetError(LocalError):
    """Why a run could not start."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the log: seconds since the start, the text, and its fields for ``-o json``."""

    t: float
    line: str
    fields: dict[str, object] = field(default_factory=dict)

    def json(self) -> str:
        return json.dumps(
            {"t": round(self.t, 4), "event": self.line.split()[0], "line": self.line, **self.fields}
        )


@dataclass(frozen=True, slots=True)
class Settings:
    heartbeat: float = 1.0  # brokers' and workers' heartbeat; a link silent for 4 is dropped
    session_grace: float = 600.0  # brokers keep a vanished client's session this long
    settle: float = 0.5  # seconds a subscription may take to reach the publishers (see checker)
    linger: float = 1.0  # at the end, wait until no delivery came for this long
    start_timeout: float = 15.0


class Member:
    """One process of the topology: how to start it, and its current incarnation."""

    def __init__(self, process: Process, argv: list[str], log: Path) -> None:
        self.process, self.argv, self.log = process, argv, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self.expected_exit = False
        self.answers: list[dict[str, object]] = []  # acknowledgements of orders, for the runner
        self.ready = threading.Event()

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def worker(self) -> bool:
        return self.process.role in ("publisher", "subscriber")

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.frozen, self.expected_exit = False, False
        self.ready.clear()
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE if self.worker else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.worker else log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, MARK: str(self.log.parent.parent)},
            )

    def signal(self, sig: int) -> None:
        if self.popen is not None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        if self.running:
            assert self.popen is not None
            self.expected_exit = True
            self.popen.kill()
            self.popen.wait()
        self._close_pipes()
        self.frozen = False

    def order(self, line: str) -> bool:
        """Write an order to a worker's stdin; False if it is not running."""
        if not self.running or self.popen is None or self.popen.stdin is None:
            return False
        try:
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def _close_pipes(self) -> None:
        if self.popen is not None and self.popen.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.popen.stdin.close()


class Puppet:
    """``with Puppet(topology, home, emit) as puppet: puppet.start(); puppet.run(commands);
    report = puppet.finish()``. ``emit`` gets each log entry as it happens (under the log's
    lock, so in order); ``warn`` gets problems worth a line on stderr."""

    def __init__(
        self,
        topology: Topology,
        home: Path,
        emit: Callable[[Entry], None],
        warn: Callable[[str], None],
        settings: Settings = Settings(),
    ) -> None:
        self.topology = topology.with_ports()
        self.home, self.emit, self.warn, self.settings = home, emit, warn, settings
        self.entries: list[Entry] = []
        self.published: list[Published] = []
        self.received: list[Received] = []
        self.windows: list[Window] = []
        self._open: dict[tuple[str, str], float] = {}  # (subscriber, pattern) -> subscribed at
        self._outstanding: dict[str, int] = defaultdict(int)  # Publish orders not done, per publisher
        self._lock = threading.Condition()
        self._start = time.monotonic()
        self._closing = threading.Event()
        self._last_delivery = 0.0  # seconds since the start, as now() and the log
        self._last_progress = 0.0
        full = topology.logging_level == "full"
        brokers = [p.name for p in topology.of_role("broker")]
        self.traces = Traces({b: home / "trace" / f"{b}.jsonl" for b in brokers}) if full else None
        self.members = {
            p.name: Member(p, self._argv(p), home / "logs" / f"{p.name}.log") for p in topology.processes
        }
        # each router (a broker, or a replicated site) -> its brokers, and the routers it links to
        self._routers = self.topology.routers()
        self._hit: dict[str, str] = {}  # replicated site -> the broker its last Crash/Freeze hit
        self._readers: list[threading.Thread] = []
        self._advertised: set[tuple[str, str]] = set()  # (publisher, topic) its broker acknowledged

    # the log --------------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self._start

    def record(self, line: str, **fields: object) -> float:
        with self._lock:
            entry = Entry(self.now(), line, fields)
            self.entries.append(entry)
            self.emit(entry)
            return entry.t

    # processes ------------------------------------------------------------------------------------

    def _argv(self, p: Process) -> list[str]:
        beat = ["--heartbeat", str(self.settings.heartbeat)]
        if p.role == "broker":
            neighbours = [a for uri in self.topology.neighbours(p.name) for a in ("--neighbor", str(uri))]
            grace = ["--session-grace", str(self.settings.session_grace)]
            data = ["--data", str(self.home / "state" / p.name)]  # a restart comes back from its log
            if self.traces is not None:
                data += ["--trace-forwarding", str(self.traces.files[p.name])]
            return [
                *WFM,
                "broker",
                "--uri",
                str(self.topology.uri(p.name)),
                *neighbours,
                *self.topology.broker_options(p.name),
                *beat,
                *grace,
                *data,
            ]
        brokers = str(self.topology.brokers_for(p.name))
        state = str(self.home / "state" / p.name)
        if p.role == "agent":
            return [*WFM, "agent", "--name", p.name, "--broker", brokers, "--state-dir", state]
        dead = ["--dead-after", str(4 * self.settings.heartbeat)]
        return [*WORKER, p.role, "--name", p.name, "--broker", brokers, "--state-dir", state, *beat, *dead]

    def _launch(self, member: Member) -> None:
        member.start()
        if member.worker:
            assert member.popen is not None and member.popen.stdout is not None
            reader = threading.Thread(
                target=self._read, args=(member, member.popen.stdout), name=f"read-{member.name}", daemon=True
            )
            reader.start()
            self._readers.append(reader)

    def start(self) -> None:
        """Brokers (waiting until the tree is linked), agents, then workers (until ready)."""
        brokers = [m for m in self.members.values() if m.process.role == "broker"]
        for member in brokers:
            self._launch(member)
        if self.traces is not None:
            reader = threading.Thread(target=self._read_traces, name="read-traces", daemon=True)
            reader.start()
            self._readers.append(reader)
        deadline = time.monotonic() + self.settings.start_timeout
        for name, (serving, expected) in self._routers.items():
            while not linked(serving, expected):
                self._exited(raise_error=True)
                if time.monotonic() > deadline:
                    raise PuppetError(f"{name} did not link within {self.settings.start_timeout:g} s")
                time.sleep(0.05)
        others = [m for m in self.members.values() if m.process.role != "broker"]
        for member in others:
            self._launch(member)
        for member in others:
            if member.worker and not member.ready.wait(max(0.0, deadline - time.monotonic())):
                self._exited(raise_error=True)
                raise PuppetError(f"{member.name} was not ready within {self.settings.start_timeout:g} s")
        self.record("Started " + " ".join(self.members), topology=self.topology.source)

    def _exited(self, raise_error: bool = False) -> None:
        """Log (or, while starting, raise) each process that exited without being told to."""
        for member in self.members.values():
            if member.popen is None or member.expected_exit or member.popen.poll() is None:
                continue
            member.expected_exit = True  # said once
            reason = f"{member.name} exited with status {member.popen.returncode} (log: {member.log})"
            if raise_error:
                raise PuppetError(reason)
            self.record(f"Exited {member.name} {member.popen.returncode}")
            self.warn(f"warning: {reason}")

    def close(self) -> None:
        """Stop every process: workers and agents first, brokers last; SIGKILL after 5 s."""
        self._closing.set()
        ordered = sorted(self.members.values(), key=lambda m: m.process.role == "broker")
        for member in ordered:
            if member.running:
                member.expected_exit = True
                if member.frozen:
                    member.signal(signal.SIGCONT)
                member._close_pipes()
                assert member.popen is not None
                member.popen.terminate()
        deadline = time.monotonic() + 5.0
        for member in ordered:
            if member.popen is not None:
                try:
                    member.popen.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    member.kill()
        for reader in self._readers:
            reader.join(2.0)

    def __enter__(self) -> Puppet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # what the workers say ------------------------------------------------------------------------

    def _read(self, member: Member, stdout: IO[bytes]) -> None:
        for raw in stdout:
            try:
                event = json.loads(raw)
                self._heard(member, event)
            except (ValueError, KeyError, TypeError) as error:
                self.warn(f"warning: {member.name} said something unexpected ({error}): {raw[:200]!r}")

    def _heard(self, member: Member, event: dict[str, object]) -> None:
        kind, name = event["e"], member.name
        with self._lock:
            if kind == "ready":
                member.ready.set()
            elif kind == "pub":
                topic, seq = str(event["topic"]), int(event["seq"])  # type: ignore[call-overload]
                t = self.record(pub_event(name, topic, seq), publisher=name, topic=topic, seq=seq)
                self.published.append(Published(name, seq, topic, t))
                self._last_progress = t
            elif kind == "sub":
                publisher, topic, seq = str(event["publisher"]), str(event["topic"]), int(event["seq"])  # type: ignore[call-overload]
                t = self.record(
                    sub_event(name, publisher, topic, seq),
                    subscriber=name,
                    publisher=publisher,
                    topic=topic,
                    seq=seq,
                )
                self.received.append(Received(name, publisher, seq, topic, t))
                self._last_delivery = t
            elif kind == "done":
                self._outstanding[name] = max(0, self._outstanding[name] - 1)
            elif kind in ("subscribed", "unsubscribed", "advertised"):
                if kind == "subscribed" and (name, str(event["topic"])) not in self._open:
                    self._open[name, str(event["topic"])] = self.now()
                member.answers.append(event)
            elif kind == "status":
                self.record(f"Status {name}: {event['text']}")
            elif kind == "error":
                self.record(f"Error {name}: {event['message']}")
            self._lock.notify_all()

    def _read_traces(self) -> None:
        """Log a BroEvent for each publication a broker reports it forwarded, as the reports come
        (every ``TRACE_POLL`` seconds), until the puppet closes."""
        while not self._closing.wait(TRACE_POLL):
            self._forwarded()

    def _forwarded(self) -> None:
        assert self.traces is not None
        with self._lock:  # one reader at a time: the traces' thread, and finish()
            for broker, publisher, topic, seq in self.traces.read():
                line = bro_event(broker, publisher, topic, seq)
                self.record(line, broker=broker, publisher=publisher, topic=topic, seq=seq)

    def _await_answer(self, member: Member, kind: str, topic: str) -> bool:
        deadline = time.monotonic() + ANSWER
        with self._lock:
            while True:
                for answer in member.answers:
                    if answer["e"] == kind and answer["topic"] == topic and not answer.get("restored"):
                        member.answers.remove(answer)
                        return True
                left = deadline - time.monotonic()
                if left <= 0 or not member.running:
                    return False
                self._lock.wait(left)

    # commands -------------------------------------------------------------------------------------

    def run(self, commands: Sequence[Command]) -> None:
        """Carry out ``commands``, once every publisher has advertised the topics it will
        publish on (so that subscriptions travel towards it before its first publication)."""
        for topic_of in dict.fromkeys((c.name, c.topic) for c in commands if isinstance(c, Publish)):
            if not self._advertise(*topic_of):
                raise PuppetError(f"{topic_of[0]} did not advertise {topic_of[1]} within {ANSWER:g} s")
        for command in commands:
            self.do(command)
        self._exited()

    def do(self, command: Command) -> None:
        """Log ``command`` and carry it out. A publisher's first ``Publish`` on a topic no script
        announced (the console's) first advertises it and waits ``settle`` seconds, the time the
        checker allows a subscription to reach a publisher, so that it is not blamed for what
        was published before its subscription could know of the publisher."""
        self._exited()
        if (
            isinstance(command, Publish)
            and (command.name, command.topic) not in self._advertised
            and self._live(command.name)
        ):
            if self._advertise(command.name, command.topic):
                time.sleep(self.settings.settle)
            else:
                self.warn(f"warning: line {command.line}: {command.name} did not advertise {command.topic}")
        self.record(str(command))
        self._do(command)

    def _advertise(self, publisher: str, topic: str) -> bool:
        """Have ``publisher`` advertise ``topic``; whether its broker acknowledged it in time."""
        member = self.members[publisher]
        if member.order(f"advertise {topic}") and self._await_answer(member, "advertised", topic):
            self._advertised.add((publisher, topic))
            return True
        return False

    def _do(self, command: Command) -> None:
        if isinstance(command, Wait):
            time.sleep(command.ms / 1000)
        elif isinstance(command, Status):
            self._status()
        elif isinstance(command, Signal):
            self._signal(command.action, self.members[self._target(command)])
        elif isinstance(command, Subscribe):
            self._subscribe(command)
        elif isinstance(command, Publish):
            member = self.members[command.name]
            if member.order(f"publish {command.count} {command.topic} {command.interval_ms}"):
                with self._lock:
                    self._outstanding[member.name] += 1
            else:
                self.warn(f"warning: line {command.line}: {member.name} is not running")

    def _subscribe(self, command: Subscribe) -> None:
        member = self.members[command.name]
        verb = "subscribe" if command.subscribe else "unsubscribe"
        if not command.subscribe:
            with self._lock:
                start = self._open.pop((member.name, command.topic), None)
                if start is not None:
                    self.windows.append(Window(member.name, command.topic, start, self.now()))
        if not member.order(f"{verb} {command.topic}"):
            self.warn(f"warning: line {command.line}: {member.name} is not running")
        elif not member.frozen and not self._await_answer(member, f"{verb}d", command.topic):
            self.warn(f"warning: line {command.line}: {member.name} did not confirm within {ANSWER:g} s")

    def _target(self, command: Signal) -> str:
        """The process a signal is for: a replicated site's leader now (``Crash``, ``Freeze``)
        or the one the site's last such command hit (``Restart``, ``Unfreeze``)."""
        if command.name not in self._routers or len(self._routers[command.name][0]) == 1:
            return command.name
        if command.action in ("Restart", "Unfreeze"):
            return self._hit.get(command.name, self._routers[command.name][0][0].id)
        try:
            with BlockingClient(self._routers[command.name][0], timeout=ANSWER) as client:
                leader = str(client.status()["site"]["member"])  # type: ignore[index]
        except (ConnectError, NoAnswer, OSError) as error:
            raise PuppetError(f"line {command.line}: no broker of {command.name} answers: {error}") from None
        self._hit[command.name] = leader
        self.record(f"Leader {command.name} {leader}", site=command.name, broker=leader)
        return leader

    def _signal(self, action: str, member: Member) -> None:
        if action == "Crash":
            member.kill()
            with self._lock:
                self._outstanding[member.name] = 0
        elif action == "Freeze":
            if member.running:
                member.signal(signal.SIGSTOP)
                member.frozen = True
        elif action == "Unfreeze":
            if member.running:
                member.signal(signal.SIGCONT)
                member.frozen = False
        else:  # Restart: whatever state it is in, the same command line again
            member.kill()
            with self._lock:
                self._outstanding[member.name] = 0
            self._launch(member)
            if member.worker and not member.ready.wait(ANSWER):
                self.warn(f"warning: {member.name} was not ready within {ANSWER:g} s of its restart")
            if member.process.role == "broker" and not self._relinked(member):
                timeout = self.settings.start_timeout
                self.warn(f"warning: {member.name} did not link again within {timeout:g} s")

    def _relinked(self, member: Member) -> bool:
        """Wait until a restarted broker is linked again to its neighbours that run (unfrozen),
        as :meth:`start` waits for the tree: a broker's start can take seconds on a busy machine,
        and a script that ended meanwhile would count what the broker still holds as lost."""
        serving, expected = next(r for r in self._routers.values() if member.name in (b.id for b in r[0]))
        if len(serving) > 1:  # one of a site's: it catches up with its site, which serves meanwhile
            return True
        neighbours = {n for n in expected if any(self._live(b.id) for b in self._routers[n][0])}
        deadline = time.monotonic() + self.settings.start_timeout
        while not linked(serving, neighbours):
            if not member.running or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _status(self) -> None:
        for member in self.members.values():
            if not member.running:
                self.record(f"Status {member.name}: not running")
            elif member.frozen:
                self.record(f"Status {member.name}: frozen")
            elif member.worker:
                member.order("status")
            elif member.process.role == "broker":
                self.record(f"Status {member.name}: {self._broker_status(member)}")
            else:
                self.record(f"Status {member.name}: running")

    def _broker_status(self, member: Member) -> str:
        try:
            with BlockingClient(self.topology.uri(member.name), timeout=2.0) as client:
                report = client.status()
        except (ConnectError, NoAnswer, OSError, TimeoutError) as error:
            return f"no answer ({error})"
        keys = ("neighbors", "clients", "subscriptions", "advertisements", "sessions_waiting")
        return ", ".join(f"{k} {report.get(k)}" for k in keys)

    # the end --------------------------------------------------------------------------------------

    def finish(self, patience: float = 10.0) -> Report:
        """Wait for the running, unfrozen publishers to finish their orders (while they make
        progress: ``patience`` seconds without one gives up), then until no delivery has come
        for ``linger`` seconds; check what was received."""
        with self._lock:
            self._last_progress = self.now()
            while True:
                busy = [n for n, k in self._outstanding.items() if k and self._live(n)]
                if not busy or self.now() - self._last_progress > patience:
                    break
                self._lock.wait(0.1)
            if busy:
                self.warn(f"warning: {', '.join(busy)} made no progress for {patience:g} s; not waited for")
            self._last_delivery = max(self._last_delivery, self.now())
            while self.now() - self._last_delivery < self.settings.linger:
                self._lock.wait(0.05)
            windows = [*self.windows, *(Window(s, p, t) for (s, p), t in self._open.items())]
            published, received = list(self.published), list(self.received)
        if self.traces is not None:
            self._forwarded()  # what the brokers wrote since the traces' thread last looked
        self._exited()
        return check(published, received, windows, self.settings.settle, self.topology.ordering)

    def _live(self, name: str) -> bool:
        """Whether ``name`` runs and is not frozen: it can act on an order or answer a link."""
        member = self.members[name]
        return member.running and not member.frozen
