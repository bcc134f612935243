"""``wfm hold``, ``wfm release`` and ``wfm approve``: thin commands over
:meth:`wfm.operations.Session.hold` and :meth:`~wfm.operations.Session.approve`, signed and
answered as ``wfm cancel`` is. A timeout (an agent that did not answer) exits with status 3."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.client import Brokers
from wfm.cli.operations import _answered, _session, timeout_option, workflow_argument
from wfm.cli.options import broker_option, checked, output_option
from wfm.cli.workflow import signing_options
from wfm.signing import Deployer
from wfm.triggers import check_gid
from workflow_messages import check_name
from workflow_messages.approvals import MAX_COMMENT

WHAT = """Without --job, every job of WORKFLOW; without --gid, every generation, those not started
yet included."""


def _job_name(name: str) -> str:
    """A job name checked as wfm validate checks it."""
    return check_name(name, "job name")


def _what(command: Callable[..., Any]) -> Callable[..., Any]:
    """The --job and --gid a hold or a release names, and the options they share."""
    for option in reversed(
        (
            workflow_argument,
            click.option(
                "--job",
                metavar="JOB",
                callback=checked(_job_name),
                help="Only this job [default: every job].",
            ),
            click.option(
                "--gid",
                metavar="GID",
                callback=checked(check_gid),
                help="Only this generation [default: every generation, new ones too].",
            ),
            broker_option,
            timeout_option(10.0),
            output_option,
            signing_options,
        )
    ):
        command = option(command)
    return command


def _holding(release: bool) -> Callable[..., None]:
    def command(
        workflow: str,
        job: str | None,
        gid: str | None,
        broker_uri: Brokers,
        timeout: float,
        output: str,
        deployer: Callable[[], Deployer],
    ) -> None:
        sign = deployer().sign
        acks = _session(
            broker_uri, timeout, lambda session: session.hold(workflow, sign, job, gid, release=release)
        )
        verb = "release" if release else "hold"
        _answered(verb, workflow, acks, output, job=job, gid=gid)

    return command


hold = click.command(
    "hold",
    help=f"""Hold jobs of WORKFLOW: a held job whose condition fires does not start; it waits
(held in wfm runs) until wfm release. A job already running goes on. {WHAT} Every agent of the
workflow keeps the hold (over restarts). Signed like a deployment: a deployer's or an operator's
key. Exit status 1 if an agent refused, 3 if one did not answer.""",
)(_what(_holding(release=False)))

release = click.command(
    "release",
    help=f"""Release what wfm hold held, exactly as it was named (releasing one job of a workflow held
whole leaves it held; the answer says what is still held): held jobs whose condition fired start,
once. {WHAT} Exit status 1 if an agent refused, 3 if one did not answer.""",
)(_what(_holding(release=True)))


@click.command()
@workflow_argument
@click.argument("job", callback=checked(_job_name))
@click.argument("gid", callback=checked(check_gid))
@click.option("--reject", is_flag=True, help="Reject: the step ends FAILURE [default: approve, SUCCESS].")
@click.option(
    "--comment", default="", help=f"Why, kept in the step's status (at most {MAX_COMMENT} characters)."
)
@broker_option
@timeout_option(10.0)
@output_option
@signing_options
def approve(
    workflow: str,
    job: str,
    gid: str,
    reject: bool,
    comment: str,
    broker_uri: Brokers,
    timeout: float,
    output: str,
    deployer: Callable[[], Deployer],
) -> None:
    """Approve the approval step JOB of generation GID of WORKFLOW (a job with an <approval>
    whose condition fired): it ends SUCCESS, or with --reject FAILURE, its status detail naming
    who decided (with --tls, an identity of a role the job names). Exit status 1 if JOB is no
    approval step, does not await approval in GID, or its agent refused; 3 if it did not answer."""
    if len(comment) > MAX_COMMENT:
        raise click.BadParameter(
            f"at most {MAX_COMMENT} characters, not {len(comment)}", param_hint="--comment"
        )
    sign = deployer().sign
    agent, result, detail = _session(
        broker_uri,
        timeout,
        lambda session: session.approve(workflow, job, gid, sign, not reject, comment),
    )
    verdict = "reject" if reject else "approve"
    _answered(verdict, workflow, {agent: (result, detail)}, output, job=job, gid=gid, verdict=verdict)
