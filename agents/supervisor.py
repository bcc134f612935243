"""The supervisor of an agent's runs: one daemon per state directory that starts every job attempt,
records how it ended, and outlives its agent.

Usage (by :class:`agents.runner.SupervisorClient`, never by hand)::

    python -S -I supervisor.py STATE_DIR

The process takes an exclusive ``flock`` on ``STATE_DIR/supervisor.lock`` (and writes its pid
there), listens on a Unix socket, forks and exits: the child is the daemon, in a session of its
own, so a SIGKILL of the agent (or a Ctrl-C sent to its terminal's process group) leaves it
running, and the agent that started it need not reap it. When the starter exits the socket
already listens, so the agent can connect at once. A second one started for the same state
directory finds the lock taken and exits at once: at most one daemon decides for a state
directory, which is what keeps jobs exactly-once.

The socket is in Linux's abstract namespace (:func:`address`: pytest's folders overflow the 108
bytes of a path), which has no file permissions: both ends check the other's ``SO_PEERCRED`` and
talk only to their own user (:func:`foreign`).

**Protocol.** JSON lines. A connection's first line is ``{"env": {...}}``, the environment its
commands run with; then requests ``{"id", "log", "command", "cwd", "timeout", "env"}`` (``env``:
what the run adds, ``WFM_WORKFLOW`` etc.), each answered ``{"id", "run": "ended", "outcome"}`` (what
was recorded of its end), ``{"id", "run": "lost"}`` or ``{"id", "error"}`` (nothing was started). A
malformed line closes its connection with one line on stderr (``STATE_DIR/supervisor.log``).

**Records.** Each generation's folder (``logs/W/GID``) has one append-only file, ``runs.jsonl``,
the daemon's record of its runs: a line ``{"log", "pid", "boot", "started"}`` when it starts one (the
process group ``wfm cancel`` signals, :func:`agents.runner.stop`, while the machine is in the
same boot; not synced) and a line ``{"log", "outcome"}`` when it ended, synced (``fdatasync``,
then the folder, which makes the logs created there durable too) before anyone is answered; the
ends reaped together are synced together. A runs file the daemon did not write itself (an earlier
daemon's, which may have died before its sync) is synced before it answers from it.
One file per generation, not per run: creating a file on ext4 costs about as much CPU as running
the job's ``/bin/sh``. The daemon, the only writer, keeps what the files of its last folders hold
(:class:`Records`), checked against the file's inode and size before each use.

**Exactly once.** The daemon is single-threaded, so its decisions are serialised; for a run (named
by its log, ``logs/W/GID/JOB.ATTEMPT.log``) it answers, in this order:

* running under this daemon: attach, and answer when it ends;
* an outcome recorded: it ended (perhaps under an earlier daemon, while no agent was there); one
  that cannot be read answers **lost**;
* a log but no outcome: an earlier daemon died after starting the command (or while recording its
  end: the line it cut short is cut off the file): **lost**, never started again, since the
  command may have run;
* nothing: create the log (``O_EXCL``), run ``/bin/sh -c COMMAND`` in the run's cwd, in its own
  process group (a timeout kills the whole pipeline, not only the shell), stdin ``/dev/null``,
  output to the log; record the group's id; at its end record the outcome, then answer everyone
  waiting for it.

A folder in the per-run layout (a ``JOB.ATTEMPT.status`` and a ``JOB.ATTEMPT.pid`` file per run)
is read when the runs file has nothing of a run.

**Leases.** A run that holds a slot of a pool (``agents.pools``) has a ``.lease`` file beside its
log, which its agent writes before asking for the run and replaces at every renewal of the slot:
the time (epoch seconds) until which it may run. The daemon kills the run's process group when
that time passes and the file says no later one (outcome ``"fenced": true``), so a run whose agent
was killed or frozen stops using the slot before the pool's keeper gives it away.

**Modes.** The state directory is its user's only (0700, made so by the agent), and what the
daemon creates is 0600 besides: a run's log and the runs files hold commands' output, and
``logs/`` may be a link to another disk. The umask is left as the agent had it: the files a
command writes are its user's business, as they would be in a shell.

A request that arrived is decided at once, even if its connection closed right after (an agent
killed after sending): it is run or never started, never half. The daemon's own descriptors are
close-on-exec, so a process a command leaves behind (``sleep 60 &``) holds neither the lock nor
the socket.

**Ending.** With no command running and no connection for :data:`IDLE` seconds, the daemon exits;
the next agent that needs one starts another. SIGTERM (or SIGINT) drains it: it starts nothing
more, goes on answering attaches and recording its running commands' ends, and exits once the last
ended; requests for runs it did not start stay unanswered until then, and the agents ask them of
the next daemon when the connection closes. An agent that stops only closes its connection: its
commands run on, and the agent restarted re-attaches to them.

Only built-in modules, imported at the start (no site packages: ``-S -I``): the daemon starts
quickly, and once per state directory, not per job attempt.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "RUNS",
    "Records",
    "address",
    "encode",
    "foreign",
    "main",
    "parse_request",
    "parse_runs",
    "peer_credentials",
    "recorded",
]

MAX_TIMEOUT = 1e9  # seconds (31 years); a longer timeout is none
IDLE = 2.0  # seconds without a command or a connection after which the daemon exits
LINE_LIMIT = 1 << 20  # bytes of one line (a connection's first one, its environment, is the longest)
OUTBOX_LIMIT = 16 << 20  # bytes of answers a connection may leave unread before it is closed
FOLDERS_CACHED = 1024  # resolved folders a daemon remembers (generations' folders, mostly)
RUN_FOLDERS_CACHED = 64  # folders whose runs file a daemon keeps read (:class:`Records`)
RUNS = "runs.jsonl"  # in each generation's folder: what the daemon recorded of its runs
BIND_PATIENCE = 2.0  # seconds a dead predecessor's socket may take to go (:func:`_listen`)
LONGEST_WAIT = 3_600_000  # milliseconds one poll() waits at most (its argument is a C int)
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
REQUEST = {"id", "log", "command", "cwd", "timeout", "env"}
RESTORED = (signal.SIGPIPE, signal.SIGXFSZ)  # ignored by Python: a command gets the default back
ENDED: dict[str, object] = {"run": "ended"}
LOST: dict[str, object] = {"run": "lost"}


def _boot_id() -> str:
    """This boot of the machine (Linux's): a process group recorded in another is long gone, and
    its number may be someone else's now."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as file:
            return file.read().strip().decode()
    except (OSError, UnicodeDecodeError):
        return ""


BOOT = _boot_id()


def _fsync_folder(path: str) -> None:
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def parse_runs(data: bytes) -> tuple[dict[str, dict[str, object]], int]:
    """What a runs file holds, by run (its log's name): its ``pid`` and ``outcome`` as far as
    recorded; and where its last whole line ends (what follows is a line a crash cut short). A
    line that is not a record is skipped: the run it was of has a log and no outcome, so lost."""
    runs: dict[str, dict[str, object]] = {}
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
            name = record.pop("log")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            continue
        if isinstance(name, str):
            runs.setdefault(name, {}).update(record)
    return runs, end


class Recorded(NamedTuple):
    """What the runs file says of one run: its process group (if recorded in this boot of the
    machine), its outcome and when it started (None where there is none)."""

    group: object
    outcome: dict[str, object] | None
    started: float | None


def recorded(log: str) -> Recorded:
    """What is recorded of the run of ``log``, for readers other than the daemon; ValueError if
    it cannot be read."""
    folder, name = os.path.split(log)
    path = os.path.join(folder, RUNS)
    try:
        with open(path, "rb") as file:
            record = parse_runs(file.read())[0].get(name)
    except FileNotFoundError:
        record = None
    except OSError as error:
        raise ValueError(f"{path} cannot be read: {error.strerror}") from None
    if record is None:
        return Recorded(_legacy_pid(log), _legacy_outcome(log), None)
    started = record.get("started")
    return Recorded(
        record.get("pid") if record.get("boot") == BOOT else None,
        _checked(record, log),
        float(started) if isinstance(started, int | float) and not isinstance(started, bool) else None,
    )


def _checked(record: dict[str, object], log: str) -> dict[str, object] | None:
    outcome = record.get("outcome")
    if outcome is not None and not isinstance(outcome, dict):
        raise ValueError(f"the outcome recorded for {log} is not an object")
    return outcome


def _legacy_outcome(log: str) -> dict[str, object] | None:
    """The outcome in the run's ``.status`` file (the per-run layout); None if there is none;
    ValueError if it cannot be read (a daemon killed while writing it)."""
    path = beside(log, ".status")
    try:
        with open(path, "rb") as file:
            data = json.loads(file.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as error:
        raise ValueError(f"status {path} cannot be read: {_one_line(error)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"status {path} is not an object")
    return data


def _legacy_pid(log: str) -> object:
    try:
        with open(beside(log, ".pid"), "rb") as file:
            return int(file.read())
    except (OSError, ValueError):
        return None


class Records:
    """The daemon's runs files: what those of its last folders hold, read again when the file is
    not the one read (the agent prunes whole folders) or has grown; and appending to them."""

    def __init__(self) -> None:
        # folder -> ((inode, size) read, the runs)
        self.folders: dict[str, tuple[tuple[int, int], dict[str, dict[str, object]]]] = {}

    def outcome(self, log: str) -> dict[str, object] | None:
        """The outcome recorded for the run of ``log``; ValueError if it cannot be read (the
        run is then answered lost, and the daemon goes on)."""
        folder, name = os.path.split(log)
        try:
            record = self._read(folder)[1].get(name)
        except OSError as error:
            raise ValueError(f"{os.path.join(folder, RUNS)} cannot be read: {error.strerror}") from None
        return _legacy_outcome(log) if record is None else _checked(record, log)

    def _read(self, folder: str) -> tuple[tuple[int, int], dict[str, dict[str, object]]]:
        path = os.path.join(folder, RUNS)
        cached = self.folders.pop(folder, None)
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return (0, 0), {}
        if cached is None or cached[0] != (stat.st_ino, stat.st_size):
            with open(path, "rb") as file:
                data = file.read()
                os.fdatasync(file.fileno())  # an earlier daemon may have died before its sync
            runs, end = parse_runs(data)
            if end < len(data):  # so that the next line starts a line
                _complain(f"cut off {path} a line cut short at offset {end}")
                os.truncate(path, end)
            cached = ((stat.st_ino, end), runs)
        self.folders[folder] = cached
        if len(self.folders) > RUN_FOLDERS_CACHED:
            del self.folders[next(iter(self.folders))]
        return cached

    def append(self, folder: str, records: list[dict[str, object]], sync: bool) -> None:
        """Append ``records`` (each with the ``log`` name it is of) to the folder's runs file, and
        if ``sync``, make them durable. OSError, and the file as it was, if they cannot be."""
        (_, size), runs = self._read(folder)
        path = os.path.join(folder, RUNS)
        data = b"".join(encode(record) for record in records)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if sync:
                    os.fdatasync(fd)
                    _fsync_folder(path)  # this file's entry, and the logs' created since
            except OSError:
                with contextlib.suppress(OSError):  # else the next read cuts what was cut short
                    os.ftruncate(fd, size)
                raise
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        for record in records:
            fields = dict(record)
            runs.setdefault(str(fields.pop("log")), {}).update(fields)
        self.folders[folder] = ((inode, size + len(data)), runs)


def encode(message: dict[str, object]) -> bytes:
    """One line of the protocol, as both ends write it."""
    return json.dumps(message).encode() + b"\n"


def address(state_dir: str | os.PathLike[str]) -> str:
    """The abstract socket address of the daemon of ``state_dir``: the same for every path that
    leads to that folder."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(state_dir))).hexdigest()
    return "\0wfm-supervisor-" + digest[:24]


def foreign(credentials: bytes) -> int | None:
    """The uid in ``credentials`` (a ``SO_PEERCRED`` answer) if it is not this process's own
    (effective) uid; None for our own user, the only one either end talks to."""
    _, uid, _ = CREDENTIALS.unpack(credentials)
    return None if uid == os.geteuid() else uid


def peer_credentials(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, CREDENTIALS.size)


def beside(log: str, suffix: str) -> str:
    """The run's file of that suffix (``.status``, ``.pid``) beside its log."""
    return log[: -len(".log")] + suffix


class RunRequest:
    """One "run R" request, checked (:func:`parse_request`)."""

    __slots__ = ("command", "cwd", "env", "log", "number", "timeout")

    def __init__(
        self, number: int, log: str, command: str, cwd: str, timeout: float | None, env: dict[str, str]
    ) -> None:
        self.number, self.log, self.command, self.cwd = number, log, command, cwd
        self.timeout, self.env = timeout, env


class Connection:
    """An agent's connection: the lines it sent not yet complete, the answers not yet sent."""

    __slots__ = ("closed", "env", "inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox, self.outbox = bytearray(), bytearray()
        self.env: dict[str, str] | None = None  # from its first line
        self.closed = False


Waiter = tuple[Connection, int]  # a connection and the id of its request


class Command:
    """A command running under this daemon, and who waits for its end. ``lease``: until when (epoch
    seconds) its ``.lease`` file, which its agent keeps, lets it run (None: it has none)."""

    __slots__ = (
        "clock",
        "deadline",
        "fenced",
        "lease",
        "log",
        "pid",
        "started",
        "timed_out",
        "timeout",
        "waiters",
    )

    def __init__(self, log: str, pid: int, started: float, timeout: float | None, clock: float) -> None:
        """``clock``: the monotonic time just before it was spawned, which its duration and
        timeout run from (not after its record was written)."""
        self.log, self.pid, self.started, self.timeout = log, pid, started, timeout
        self.clock = clock
        self.deadline = None if timeout is None else self.clock + timeout
        self.timed_out = False
        self.lease = read_lease(log)
        self.fenced = False  # killed when its lease ran out
        self.waiters: list[Waiter] = []


def read_lease(log: str) -> float | None:
    """The time (epoch seconds) the run of ``log`` may run until, as its agent last wrote it
    beside the log (``.lease``: a run that holds a pool's slot, ``agents.pools``); None if it has
    no lease file (or one that cannot be read: a half-written one is never seen, its agent
    renames it into place)."""
    try:
        with open(beside(log, ".lease"), "rb") as file:
            return float(file.read(64))
    except (OSError, ValueError):
        return None


def _text(value: object, what: str) -> str:
    """``value`` if it is a string a system call takes (no NUL, encodable), else ValueError."""
    if not isinstance(value, str) or b"\0" in os.fsencode(value):
        raise ValueError(f"{what} is not a string without NUL")
    return value


def parse_environment(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("env is not an object")
    env = {_text(name, "a variable name"): _text(text, "a variable") for name, text in value.items()}
    if any(not name or "=" in name for name in env):
        raise ValueError("a variable name is empty or holds '='")
    return env


def parse_request(message: object, state_dir: str, folders: dict[str, str] | None = None) -> RunRequest:
    """The request in ``message``, its log resolved and checked to be inside ``logs/`` of
    ``state_dir``; ValueError (one line) if it is not one. ``folders`` caches what folders
    resolved to (a daemon's): resolving walks every component with a system call, and a
    generation's runs all share one folder."""
    if not isinstance(message, dict) or set(message) != REQUEST:
        raise ValueError(f"a request has exactly the fields {sorted(REQUEST)}")
    number, timeout = message["id"], message["timeout"]
    if type(number) is not int:
        raise ValueError("id is not an integer")
    if timeout is not None and type(timeout) not in (int, float):
        raise ValueError("timeout is not a number or null")
    given = _text(message["log"], "log")
    folders = {} if folders is None else folders
    logs = _resolved(os.path.join(state_dir, "logs"), folders)
    folder = _resolved(os.path.dirname(given), folders)
    name = os.path.basename(given)
    if not os.path.isabs(given) or not folder.startswith(logs + os.sep) or not name.endswith(".log"):
        raise ValueError(f"log {given!r} is not a .log file inside {logs}")
    seconds = None if timeout is None or not 0 < timeout < MAX_TIMEOUT else float(timeout)
    command, cwd = _text(message["command"], "command"), _text(message["cwd"], "cwd")
    return RunRequest(
        number, os.path.join(folder, name), command, cwd, seconds, parse_environment(message["env"])
    )


def _resolved(path: str, cache: dict[str, str]) -> str:
    resolved = cache.get(path)
    if resolved is None:
        if len(cache) >= FOLDERS_CACHED:
            cache.clear()
        resolved = cache[path] = os.path.realpath(path)
    return resolved


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


class Daemon:
    """The poll loop over the listening socket, the connections and the signal wake-up pipe.

    A command's end comes as SIGCHLD, through the wake-up pipe, and is reaped with
    ``waitpid(-1, WNOHANG)``: no descriptor per command (a pidfd each would run out of descriptors
    past a thousand running jobs), and no reused pid is ever mistaken for a command, since a pid
    is not reused before its parent, this process, reaps it."""

    def __init__(self, state_dir: str, listener: socket.socket) -> None:
        self.state_dir = state_dir
        self.listener = listener
        self.poll = select.poll()
        self.connections: dict[int, Connection] = {}  # by socket fd
        self.commands: dict[str, Command] = {}  # by log
        self.children: dict[int, Command] = {}  # by pid
        self.folders: dict[str, str] = {}  # resolved (:func:`parse_request`)
        self.records = Records()
        self.draining = False  # set by SIGTERM or SIGINT, before the loop handles anything after it
        self.quiet_since: float | None = None
        self.wakeup, wakeup = os.pipe()
        for fd in (self.wakeup, wakeup):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)  # a byte waiting is enough
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._signalled)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to write to the pipe
        listener.setblocking(False)
        self.poll.register(listener.fileno(), select.POLLIN)
        self.poll.register(self.wakeup, select.POLLIN)

    def serve(self) -> None:
        """Until idle (or drained): handle what is ready, kill what timed out."""
        while not self._finished():
            for fd, mask in self.poll.poll(self._wait()):
                self._ready(fd, mask)
            self._expire(time.monotonic())
        self.poll.unregister(self.listener.fileno())
        self.listener.close()  # first: a late agent is refused and starts the next daemon
        for connection in list(self.connections.values()):
            self._close(connection)

    def _signalled(self, signum: int, frame: object) -> None:
        """Only a note (the loop says so, :meth:`_woken`): printing here could re-enter a print."""
        self.draining = True

    def _finished(self) -> bool:
        if self.draining or self.commands or self.connections:
            self.quiet_since = None
            return self.draining and not self.commands
        now = time.monotonic()
        if self.quiet_since is None:
            self.quiet_since = now
        return now - self.quiet_since >= IDLE

    def _wait(self) -> int:
        """Milliseconds poll() may wait: until the next timeout, or the end of the idle time."""
        ends = [command.deadline for command in self.commands.values() if command.deadline is not None]
        to_clock = time.monotonic() - time.time()  # a lease is in epoch seconds (its agent's clock)
        ends += [command.lease + to_clock for command in self.commands.values() if command.lease is not None]
        if self.quiet_since is not None:
            ends.append(self.quiet_since + IDLE)
        if not ends:
            return LONGEST_WAIT
        return min(LONGEST_WAIT, max(0, int((min(ends) - time.monotonic()) * 1000) + 1))

    def _ready(self, fd: int, mask: int) -> None:
        """One descriptor poll() named. Sockets are non-blocking: an event that went stale in the
        same round (its fd closed, the number reused) does nothing."""
        if fd == self.listener.fileno():
            self._accept()
        elif fd == self.wakeup:
            self._woken(os.read(self.wakeup, 4096))
        elif fd in self.connections and mask & select.POLLOUT:
            self._flush(self.connections[fd])  # its reading waits for the next round
        elif fd in self.connections:
            self._read(self.connections[fd])

    def _woken(self, signals: bytes) -> None:
        """Signals arrived (the pipe holds their numbers): reap ended commands, say why it drains."""
        for number in {signal.SIGTERM, signal.SIGINT} & set(signals):
            _complain(f"signal {number}: starting nothing more, exiting once {len(self.commands)} runs end")
        self._reap()

    # connections ----------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as error:  # out of descriptors: it waits in the backlog
                _complain(f"cannot accept a connection: {error.strerror}")
                time.sleep(0.1)  # or poll() would name the listener again at once, and again
                return
            uid = foreign(peer_credentials(sock))
            if uid is not None:
                _complain(f"refused a connection from uid {uid}")
                sock.close()
                continue
            sock.setblocking(False)
            self.connections[sock.fileno()] = Connection(sock)
            self.poll.register(sock.fileno(), select.POLLIN)

    def _read(self, connection: Connection) -> None:
        """Take what arrived and handle its complete lines. At the end of the stream (the agent
        closed, or died), every line that came before it has been handled: a request that was
        sent is decided; an incomplete last one is dropped, so never started."""
        try:
            data = connection.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(connection)
            return
        connection.inbox += data
        while not connection.closed and (end := connection.inbox.find(b"\n")) >= 0:
            line = bytes(connection.inbox[:end])
            del connection.inbox[: end + 1]
            self._line(connection, line)
        if not connection.closed and len(connection.inbox) > LINE_LIMIT:
            _complain(f"closed a connection whose line exceeds {LINE_LIMIT} bytes")
            self._close(connection)

    def _line(self, connection: Connection, line: bytes) -> None:
        try:
            message = json.loads(line)
            if connection.env is None:
                if not isinstance(message, dict) or set(message) != {"env"}:
                    raise ValueError('the first line is not {"env": {...}}')
                connection.env = parse_environment(message["env"])
                return
            request = parse_request(message, self.state_dir, self.folders)
        except (ValueError, TypeError, RecursionError) as error:
            _complain(f"closed a connection after a malformed line: {_one_line(error)}")
            self._close(connection)
            return
        self._decide(connection, request)

    def _answer(self, waiter: Waiter, answer: Mapping[str, object]) -> None:
        connection, number = waiter
        if connection.closed:
            return  # its agent went away; the next one asks again
        connection.outbox += encode({"id": number, **answer})
        self._flush(connection)

    def _flush(self, connection: Connection) -> None:
        try:
            sent = connection.sock.send(connection.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(connection)
            return
        del connection.outbox[:sent]
        if len(connection.outbox) > OUTBOX_LIMIT:
            _complain("closed a connection that reads none of its answers")
            self._close(connection)
            return
        mask = select.POLLIN | (select.POLLOUT if connection.outbox else 0)
        self.poll.modify(connection.sock.fileno(), mask)

    def _close(self, connection: Connection) -> None:
        """Forget a connection; the commands it started run on."""
        if not connection.closed:
            connection.closed = True
            del self.connections[connection.sock.fileno()]
            self.poll.unregister(connection.sock.fileno())
            connection.sock.close()

    # runs -----------------------------------------------------------------------------------

    def _decide(self, connection: Connection, request: RunRequest) -> None:
        """Attach, answer from the files, or start: see the module's docstring."""
        waiter = (connection, request.number)
        command = self.commands.get(request.log)
        if command is not None:
            command.waiters.append(waiter)
            return
        try:
            outcome = self.records.outcome(request.log)
        except ValueError as error:
            _complain(f"answered lost: {error}")
            self._answer(waiter, LOST)
            return
        if outcome is not None:
            self._answer(waiter, {**ENDED, "outcome": outcome})
        elif os.path.lexists(request.log):
            self._answer(waiter, LOST)
        elif not self.draining:  # draining: unanswered, the next daemon starts it
            assert connection.env is not None
            self._start(waiter, request, {**connection.env, **request.env})

    def _start(self, waiter: Waiter, request: RunRequest, env: dict[str, str]) -> None:
        try:  # the log is the mark that the command may have started: created first, once
            output = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            self._answer(waiter, {"error": f"cannot create its log: {error.strerror}"})
            return
        started, clock = time.time(), time.monotonic()
        try:
            pid = _spawn(request, env, output)
        except OSError as error:
            failure = f"cannot start: {error.strerror} (cwd {request.cwd})"
            self._record([(request.log, {"started": started, "duration": 0.0, "error": failure}, [waiter])])
            return
        finally:
            os.close(output)
        folder, name = os.path.split(request.log)
        try:
            # when: for the dashboard, how long a running job has run
            record = {"log": name, "pid": pid, "boot": BOOT, "started": round(started, 3)}
            self.records.append(folder, [record], sync=False)
        except OSError as error:
            _complain(f"cannot record the process group of {request.log} (not cancellable): {error.strerror}")
        command = Command(request.log, pid, started, request.timeout, clock)
        command.waiters.append(waiter)
        self.commands[request.log] = self.children[pid] = command  # before its SIGCHLD is handled

    def _expire(self, now: float) -> None:
        """Kill the process group of every command past its timeout, or past its lease as its
        agent last renewed it (read again when the one known runs out); its SIGCHLD tells its
        end. The lease is the agent's self-fencing (``agents.pools``) when the agent cannot do it
        itself: killed or frozen while the slot's keeper may give the slot away."""
        wall = time.time()
        for command in self.commands.values():
            if command.deadline is not None and now >= command.deadline:
                command.deadline, command.timed_out = None, True
                _kill_group(command.pid)
            elif command.lease is not None and wall >= command.lease:
                command.lease = read_lease(command.log)
                if command.lease is None or wall >= command.lease:
                    command.lease, command.fenced = None, True
                    _kill_group(command.pid)

    def _reap(self) -> None:
        """Record the end of every command that ended (one SIGCHLD may stand for several), all
        with one sync per folder."""
        ended: list[tuple[str, dict[str, object], list[Waiter]]] = []
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            command = self.children.pop(pid, None)
            if command is not None:
                del self.commands[command.log]
                outcome: dict[str, object] = {
                    "started": command.started,
                    "duration": time.monotonic() - command.clock,
                    "code": None
                    if command.timed_out or command.fenced
                    else os.waitstatus_to_exitcode(status),
                    "timeout": command.timeout,
                    **({"fenced": True} if command.fenced else {}),
                }
                ended.append((command.log, outcome, command.waiters))
        self._record(ended)

    def _record(self, ended: list[tuple[str, dict[str, object], list[Waiter]]]) -> None:
        """Record how runs ended, then answer: "ended" with the outcome, or "lost" if it cannot
        be recorded (what any later request finds then: a log and no outcome)."""
        by_folder: dict[str, list[tuple[str, dict[str, object], list[Waiter]]]] = {}
        for run in ended:
            by_folder.setdefault(os.path.dirname(run[0]), []).append(run)
        for folder, runs in by_folder.items():
            records: list[dict[str, object]] = [
                {"log": os.path.basename(log), "outcome": outcome} for log, outcome, _ in runs
            ]
            try:
                self.records.append(folder, records, sync=True)
                answers = [{**ENDED, "outcome": outcome} for _, outcome, _ in runs]
            except OSError as error:
                _complain(f"cannot record how {len(runs)} runs in {folder} ended: {error.strerror}")
                answers = [LOST] * len(runs)
            for (_, _, waiters), answer in zip(runs, answers, strict=True):
                for waiter in waiters:
                    self._answer(waiter, answer)


def _spawn(request: RunRequest, env: dict[str, str], output: int) -> int:
    """``/bin/sh -c COMMAND`` in its cwd, in a session and process group of its own."""
    os.chdir(request.cwd)  # posix_spawn has no cwd; the loop is single-threaded
    try:
        return os.posix_spawn(
            "/bin/sh",
            ["/bin/sh", "-c", request.command],
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
            ],
            setsid=True,
            setsigdef=RESTORED,
        )
    finally:
        os.chdir("/")


def _kill_group(pid: int) -> None:
    try:  # noqa: SIM105 (contextlib.suppress would import contextlib, costing start-up time)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


def _complain(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} supervisor {os.getpid()}: {message}", file=sys.stderr, flush=True)


def _lock(state_dir: str) -> int | None:
    """The descriptor holding the state directory's supervisor lock, or None if another holds it."""
    fd = os.open(os.path.join(state_dir, "supervisor.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _listen(name: str) -> socket.socket:
    """A socket listening on ``name``. The address may still be taken for an instant by a
    predecessor killed with SIGKILL: the kernel can release its lock before its socket."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + BIND_PATIENCE
    while True:
        try:
            listener.bind(name)
            break
        except OSError as error:
            if error.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                listener.close()
                raise
            time.sleep(0.01)
    listener.listen(socket.SOMAXCONN)
    return listener


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: supervisor.py STATE_DIR", file=sys.stderr)
        return 2
    state_dir = os.path.realpath(argv[0])
    try:
        lock = _lock(state_dir)
        if lock is None:
            _complain(f"another supervisor serves {state_dir}")
            return 0
        listener = _listen(address(state_dir))
    except OSError as error:
        _complain(f"cannot start for {state_dir}: {error.strerror or error}")
        return 1
    child = os.fork()
    if child:  # the socket listens: the agent that started us may connect
        # the daemon's pid, for people (and tests) who look for it: written before this exit, so
        # it is there once the starter returns, and over the old one without emptying the file
        pid = f"{child}\n".encode()
        with contextlib.suppress(OSError):  # (the daemon serves without it)
            os.pwrite(lock, pid, 0)
            os.ftruncate(lock, len(pid))
        os._exit(0)
    os.setsid()
    os.chdir("/")
    Daemon(state_dir, listener).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
