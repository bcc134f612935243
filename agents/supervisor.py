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
its status file holds), ``{"id", "run": "lost"}`` or ``{"id", "error"}`` (nothing was started). A
malformed line closes its connection with one line on stderr (``STATE_DIR/supervisor.log``).

**Exactly once.** The daemon is single-threaded, so its decisions are serialised; for a run (named
by its log, ``logs/W/GID/JOB.ATTEMPT.log``) it answers, in this order:

* running under this daemon: attach, and answer when it ends;
* a status file: it ended (perhaps under an earlier daemon, while no agent was there); a status
  file that cannot be read (a daemon killed while writing it) answers **lost**;
* a log but no status: an earlier daemon died after starting the command: **lost**, never started
  again, since the command may have run;
* nothing: create the log (``O_EXCL``), run ``/bin/sh -c COMMAND`` in the run's cwd, in its own
  process group (a timeout kills the whole pipeline, not only the shell), stdin ``/dev/null``,
  output to the log; write the group's id to ``JOB.ATTEMPT.pid`` (``wfm cancel`` signals it,
  :func:`agents.runner.stop`); at its end create ``JOB.ATTEMPT.status`` with the outcome, fsync'd
  with its folder (:func:`write_new`), then answer everyone waiting for it. The file is created
  in place, not renamed into it: whoever reads one that a crash cut short answers lost, as for a
  missing one, and a run costs one system call less.

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

Only built-in modules, imported at the start (no site packages: ``-S -I``): the daemon starts in
about 20 ms, once per state directory rather than once per job attempt as before.
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

__all__ = [
    "address",
    "encode",
    "foreign",
    "main",
    "parse_request",
    "peer_credentials",
    "read_outcome",
    "write_atomically",
    "write_new",
]

MAX_TIMEOUT = 1e9  # seconds (31 years); a longer timeout is none
IDLE = 2.0  # seconds without a command or a connection after which the daemon exits
LINE_LIMIT = 1 << 20  # bytes of one line (a connection's first one, its environment, is the longest)
OUTBOX_LIMIT = 16 << 20  # bytes of answers a connection may leave unread before it is closed
FOLDERS_CACHED = 1024  # resolved folders a daemon remembers (generations' folders, mostly)
BIND_PATIENCE = 2.0  # seconds a dead predecessor's socket may take to go (:func:`_listen`)
LONGEST_WAIT = 3_600_000  # milliseconds one poll() waits at most (its argument is a C int)
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
REQUEST = {"id", "log", "command", "cwd", "timeout", "env"}
RESTORED = (signal.SIGPIPE, signal.SIGXFSZ)  # ignored by Python: a command gets the default back
ENDED: dict[str, object] = {"run": "ended"}
LOST: dict[str, object] = {"run": "lost"}


def write_atomically(path: str | os.PathLike[str], data: dict[str, object]) -> None:
    """``path`` holds either nothing or all of ``data``, whenever the machine stops."""
    path = os.fspath(path)
    temporary = path + ".tmp"
    _write_synced(temporary, os.O_TRUNC, data)
    os.replace(temporary, path)
    _fsync_folder(path)


def write_new(path: str, data: dict[str, object]) -> None:
    """Create ``path`` holding ``data``, durable on return (the file and its folder fsync'd).
    FileExistsError if it exists. A crash may leave it empty or cut: see :func:`read_outcome`."""
    _write_synced(path, os.O_EXCL, data)
    _fsync_folder(path)


def _write_synced(path: str, flags: int, data: dict[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | flags, 0o644)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(path: str) -> None:
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_outcome(path: str) -> dict[str, object] | None:
    """The outcome in a status file; None if there is none; ValueError if it cannot be read (a
    daemon killed while writing it, a machine crash before the data reached the disk)."""
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


class Request:
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
    """A command running under this daemon, and who waits for its end."""

    __slots__ = ("clock", "deadline", "log", "pid", "started", "timed_out", "timeout", "waiters")

    def __init__(self, log: str, pid: int, started: float, timeout: float | None) -> None:
        self.log, self.pid, self.started, self.timeout = log, pid, started, timeout
        self.clock = time.monotonic()
        self.deadline = None if timeout is None else self.clock + timeout
        self.timed_out = False
        self.waiters: list[Waiter] = []


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


def parse_request(message: object, state_dir: str, folders: dict[str, str] | None = None) -> Request:
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
    return Request(
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

    def _decide(self, connection: Connection, request: Request) -> None:
        """Attach, answer from the files, or start: see the module's docstring."""
        waiter = (connection, request.number)
        command = self.commands.get(request.log)
        if command is not None:
            command.waiters.append(waiter)
            return
        try:
            outcome = read_outcome(beside(request.log, ".status"))
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

    def _start(self, waiter: Waiter, request: Request, env: dict[str, str]) -> None:
        try:  # the log is the mark that the command may have started: created first, once
            output = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as error:
            self._answer(waiter, {"error": f"cannot create its log: {error.strerror}"})
            return
        started = time.time()
        try:
            pid = _spawn(request, env, output)
        except OSError as error:
            failure = f"cannot start: {error.strerror} (cwd {request.cwd})"
            self._record(request.log, {"started": started, "duration": 0.0, "error": failure}, [waiter])
            return
        finally:
            os.close(output)
        _write_group(request.log, pid)
        command = Command(request.log, pid, started, request.timeout)
        command.waiters.append(waiter)
        self.commands[request.log] = self.children[pid] = command  # before its SIGCHLD is handled

    def _expire(self, now: float) -> None:
        """Kill the process group of every command past its timeout; its SIGCHLD tells its end."""
        for command in self.commands.values():
            if command.deadline is not None and now >= command.deadline:
                command.deadline, command.timed_out = None, True
                _kill_group(command.pid)

    def _reap(self) -> None:
        """Record the end of every command that ended: one SIGCHLD may stand for several."""
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            command = self.children.pop(pid, None)
            if command is not None:
                self._ended(command, status)

    def _ended(self, command: Command, status: int) -> None:
        """Record the command's outcome, answer who waits."""
        del self.commands[command.log]
        outcome: dict[str, object] = {
            "started": command.started,
            "duration": time.monotonic() - command.clock,
            "code": None if command.timed_out else os.waitstatus_to_exitcode(status),
            "timeout": command.timeout,
        }
        self._record(command.log, outcome, command.waiters)

    def _record(self, log: str, outcome: dict[str, object], waiters: list[Waiter]) -> None:
        """Write the status file, then answer: "ended" with the outcome, or "lost" if it cannot
        be written (what any later request finds then: a log and no status, or one cut short)."""
        answer: dict[str, object]
        try:
            write_new(beside(log, ".status"), outcome)
            answer = {**ENDED, "outcome": outcome}
        except OSError as error:
            _complain(f"cannot record how {log} ended: {error.strerror}")
            answer = LOST
        for waiter in waiters:
            self._answer(waiter, answer)


def _spawn(request: Request, env: dict[str, str], output: int) -> int:
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


def _write_group(log: str, pid: int) -> None:
    """The command's process group id beside its log, for a cancellation (:func:`agents.runner.stop`)."""
    try:
        fd = os.open(beside(log, ".pid"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)
    except OSError as error:
        _complain(f"cannot write the process group of {log} (it cannot be cancelled): {error.strerror}")


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
