"""``wfm certs init|issue|revoke|list``: a deployment's CA and identities, thin commands over
wfm.certs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wfm.certs import DEFAULT_DAYS, DEFAULT_HOSTS, ROLES, init, issue, listing, revocations, revoke
from wfm.cli.options import output_option

DIRECTORY = click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
FORCE = click.option(
    "--force", is_flag=True, help="Replace what is there (every holder needs the new files)."
)


@click.group()
def certs() -> None:
    """Make, revoke and list the certificates of a deployment (one CA, one identity per process)."""


@certs.command("init")
@DIRECTORY
@FORCE
def init_command(directory: Path, force: bool) -> None:
    """Make the CA in DIRECTORY: ca.crt (give it to everyone) and ca.key (keep it secret)."""
    click.echo(init(directory, force))


@certs.command("issue")
@DIRECTORY
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    required=True,
    help="What NAME may be (the OU): broker; agent; deployer (deploy, trigger, cancel, rerun);"
    " operator (trigger, cancel, rerun: not deploy); scheduler (trigger only); monitor (read);"
    " historian (the historian process); client.",
)
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


@certs.command("revoke")
@DIRECTORY
@click.argument("name")
def revoke_command(directory: Path, name: str) -> None:
    """Revoke identity NAME: its certificate's serial goes in DIRECTORY/ca.crl, signed by the CA.
    Copy ca.crl to every host, next to ca.crt: brokers then refuse NAME (and close its links)
    and agents its signatures, within seconds, without a restart. Revoking twice changes nothing."""
    path, entry, new = revoke(directory, name)
    if new:
        click.echo(f"{path}: revoked {name} (serial {entry.serial:x})")
    else:
        click.echo(f"{path}: {name} (serial {entry.serial:x}) was revoked already, {entry.revoked:%Y-%m-%d}")


@certs.command("list")
@click.argument(
    "directory", required=False, envvar="WFM_TLS", type=click.Path(file_okay=False, path_type=Path)
)
@output_option
def list_command(directory: Path | None, output: str) -> None:
    """Every certificate in DIRECTORY (default: $WFM_TLS): name, role, expiry, a broker's hosts
    and whether ca.crl revokes it; then the revoked certificates no longer in DIRECTORY (replaced
    since). -o json: one object each, {"name", "role", "expires", "hosts", "serial", "revoked"}
    ("revoked": when, or null; "role" and "expires" null for one no longer in DIRECTORY)."""
    if directory is None:
        raise click.UsageError("give DIRECTORY, or set WFM_TLS")
    issued = listing(directory)
    records: list[dict[str, object]] = []
    lines = []
    for item in issued:
        revoked = f"  REVOKED {item.revoked:%Y-%m-%d %H:%M}Z" if item.revoked else ""
        hosts = f"  {','.join(item.hosts)}" if item.hosts else ""
        lines.append(f"{item.name:<16} {item.role:<9} expires {item.expires:%Y-%m-%d %H:%M}Z{revoked}{hosts}")
        records.append(
            {
                "name": item.name,
                "role": item.role,
                "expires": item.expires.isoformat(),
                "hosts": item.hosts,
                "serial": f"{item.serial:x}",
                "revoked": None if item.revoked is None else item.revoked.isoformat(),
            }
        )
    here = {item.serial for item in issued}
    for entry in revocations(directory):
        if entry.serial in here:
            continue
        when = f"{entry.revoked:%Y-%m-%d %H:%M}Z"
        lines.append(f"{entry.name:<16} {'-':<9} REVOKED {when} (serial {entry.serial:x}, replaced since)")
        records.append(
            {
                "name": entry.name,
                "role": None,
                "expires": None,
                "hosts": [],
                "serial": f"{entry.serial:x}",
                "revoked": entry.revoked.isoformat(),
            }
        )
    for line, record in zip(lines, records, strict=True):
        click.echo(json.dumps(record) if output == "json" else line)
