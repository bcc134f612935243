"""``wfm certs init|issue|list``: a deployment's CA and identities, thin commands over wfm.certs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wfm.certs import DEFAULT_DAYS, DEFAULT_HOSTS, ROLES, init, issue, listing
from wfm.cli.options import output_option

DIRECTORY = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
FORCE = click.option(
    "--force", is_flag=True, help="Replace what is there (every holder needs the new files)."
)


@click.group()
def certs() -> None:
    """Make and list the certificates of a deployment (one CA, one identity per process)."""


@certs.command("init")
@DIRECTORY
@FORCE
def init_command(directory: Path, force: bool) -> None:
    """Make the CA in DIRECTORY: ca.crt (give it to everyone) and ca.key (keep it secret)."""
    click.echo(init(directory, force))


@certs.command("issue")
@DIRECTORY
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), required=True, help="What NAME may be (the OU).")
@click.option(
    "--days", type=click.IntRange(1), default=DEFAULT_DAYS, show_default=True, help="Days it is valid."
)
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="A broker's DNS name or IP address, as its clients dial it (repeatable)"
    f" [default: {', '.join(DEFAULT_HOSTS)}].",
)
@FORCE
def issue_command(
    directory: Path, name: str, role: str, days: int, hosts: tuple[str, ...], force: bool
) -> None:
    """Issue identity NAME with ROLE from the CA in DIRECTORY: NAME.crt and NAME.key."""
    click.echo(issue(directory, name, role, days, hosts, force))


@certs.command("list")
@DIRECTORY
@output_option
def list_command(directory: Path, output: str) -> None:
    """Every certificate in DIRECTORY: name, role, expiry and a broker's hosts (-o json: one
    object each, {"name", "role", "expires", "hosts"})."""
    for item in listing(directory):
        if output == "json":
            expires = item.expires.isoformat()
            click.echo(
                json.dumps({"name": item.name, "role": item.role, "expires": expires, "hosts": item.hosts})
            )
            continue
        hosts = f"  {','.join(item.hosts)}" if item.hosts else ""
        click.echo(f"{item.name:<16} {item.role:<9} expires {item.expires:%Y-%m-%d %H:%M}Z{hosts}")
