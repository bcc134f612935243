"""``wfm puppet``: run a PuppetMaster script, or its console, against a topology (thin over
:mod:`wfm.puppet`)."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click

from wfm.cli.options import output_option
from wfm.puppet import Command, check_script, load_script
from wfm.puppet.console import PROMPT, console
from wfm.puppet.runner import Entry, Puppet, Settings
from wfm.topology import load_topology, parse_topology

# without --topology: three sites in a line, a publisher at one end, subscribers on the others
DEFAULT_TOPOLOGY = """\
Site site0 Parent none
Site site1 Parent site0
Site site2 Parent site1
Process broker0 Is broker On site0 URL tcp://127.0.0.1:0/broker
Process broker1 Is broker On site1 URL tcp://127.0.0.1:0/broker
Process broker2 Is broker On site2 URL tcp://127.0.0.1:0/broker
Process publisher0 Is publisher On site0 URL tcp://127.0.0.1:0/pub
Process subscriber0 Is subscriber On site2 URL tcp://127.0.0.1:0/sub
Process subscriber1 Is subscriber On site1 URL tcp://127.0.0.1:0/sub
"""


@click.command()
@click.argument("script", required=False, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--console",
    "interactive",
    is_flag=True,
    help="Read commands from standard input, one at a time, each carried out as it comes "
    "(the same as SCRIPT '-'); a bad one is an error line, not the end; end of input ends the run.",
)
@click.option(
    "--topology",
    "topology_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="SESDAD configuration file (or .toml) [default: broker0-broker1-broker2 in a line, "
    "publisher0 on broker0, subscriber1 on broker1, subscriber0 on broker2].",
)
@click.option(
    "--dir",
    "home",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the processes keep their state and logs [default: a temporary directory, removed].",
)
@click.option(
    "--heartbeat",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds between pings on idle links; silent for 4 of them, a link is dropped.",
)
@click.option(
    "--session-grace",
    type=click.FloatRange(0),
    default=600.0,
    show_default=True,
    help="Seconds a broker keeps the session of a client that vanished.",
)
@click.option(
    "--settle",
    type=click.FloatRange(0),
    default=0.5,
    show_default=True,
    help="Seconds a subscription may take to take effect: publications sooner are not "
    "counted as lost if missed.",
)
@click.option(
    "--linger",
    type=click.FloatRange(0),
    default=1.0,
    show_default=True,
    help="At the end, wait until no delivery has come for this long.",
)
@output_option
def puppet(
    script: Path | None,
    interactive: bool,
    topology_file: Path | None,
    home: Path | None,
    heartbeat: float,
    session_grace: float,
    settle: float,
    linger: float,
    output: str,
) -> None:
    """Run a SESDAD PuppetMaster SCRIPT (or, with --console or '-', the commands typed on
    standard input) and print the time-ordered log, then what was lost, duplicated, delivered
    unasked or out of the topology's Ordering per publisher and subscriber; exit status 1 if the
    checks of that Ordering found anything.

    \b
    Subscriber NAME Subscribe|Unsubscribe TOPIC     (TOPIC: /a/b, or /a/* for a prefix)
    Publisher NAME Publish N Ontopic TOPIC Interval MS [ms]
    Crash NAME    (SIGKILL)     Freeze NAME  (SIGSTOP)     Unfreeze NAME  (SIGCONT)
    Restart NAME  (start it again, same arguments and state)
    Wait MS [ms]  Status

    Every process of the topology is started first, and stopped at the end (or on Ctrl-C).
    With the topology's LoggingLevel full, the log has BroEvent lines too: each broker reports
    what it forwarded (wfm broker --trace-forwarding)."""
    from_stdin = interactive or script == Path("-")
    if script is None and not from_stdin:
        raise click.UsageError("give a SCRIPT, or --console (or '-') to type commands")
    if interactive and script is not None and script != Path("-"):
        raise click.UsageError("give a SCRIPT or --console, not both")
    topology = (
        load_topology(topology_file) if topology_file else parse_topology(DEFAULT_TOPOLOGY, "<default>")
    )
    commands: list[Command] = []
    if not from_stdin:
        assert script is not None
        commands = load_script(script)
        check_script(commands, topology, str(script))
    as_json = output == "json"

    def emit(entry: Entry) -> None:
        click.echo(entry.json() if as_json else entry.line)

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    settings = Settings(heartbeat, session_grace, settle, linger)
    with tempfile.TemporaryDirectory(prefix="wfm-puppet-") as temporary:
        where = home or Path(temporary)
        with Puppet(topology, where, emit, lambda text: click.echo(text, err=True), settings) as runner:
            runner.start()
            if from_stdin:
                prompt = _prompt()
                console(runner, topology, sys.stdin, lambda text: click.echo(text, err=True), prompt)
                if prompt is not None:
                    click.echo(err=True)  # the summary on a line of its own, not after the last prompt
            else:
                runner.run(commands)
            report = runner.finish()
    if as_json:
        click.echo(json.dumps({"summary": report.as_dict()}))
    else:
        for line in report.summary():
            click.echo(line)
    if not report.ok:
        raise SystemExit(1)


def _prompt() -> Callable[[], None] | None:
    """A prompt on stderr before each command, if a person types them (stdin is a terminal);
    none for piped input, whose output is a log to read or parse."""
    if not sys.stdin.isatty():
        return None
    return lambda: click.echo(PROMPT, nl=False, err=True)
