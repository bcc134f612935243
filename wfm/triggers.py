"""Starting generations: generation ids, trigger dates, and publishing Triggers.

Shared by ``wfm trigger`` (one Trigger) and ``wfm schedule`` (one per cron fire), so both name
generations and validate input the same way.
"""

from __future__ import annotations

import re
import secrets
import time
from datetime import date, datetime

from broker.client import BlockingClient, Brokers
from broker.language.values import NAME_RE
from workflow_messages import trigger, trigger_advertisement

__all__ = ["TriggerPublisher", "check_gid", "check_workflow", "new_gid", "parse_date"]

_GID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\Z")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
# A subscription travels towards a publisher only once the publisher's advertisement has reached
# its broker (docs/overlay.md), so a Trigger published right after a fresh advertisement would miss
# every subscriber on another broker. Local hops take milliseconds; this leaves a wide margin.
ADVERTISEMENT_SETTLE = 0.5


def new_gid(now: datetime, suffix: str | None = None) -> str:
    """``20261123-114523-3f9a``: sorts by creation time (to the second), and the random suffix
    keeps two generations started in the same second apart."""
    return f"{now:%Y%m%d-%H%M%S}-{suffix or secrets.token_hex(2)}"


def check_gid(gid: str) -> str:
    """A gid given by the user: 1 to 64 letters, digits and ``_ . : -``, starting with a letter or
    digit (so it is one plain token in logs, file names and the message language)."""
    if not _GID_RE.match(gid):
        raise ValueError(
            f"invalid gid {gid!r} (1 to 64 letters, digits and _ . : -, not starting with one of _ . : -)"
        )
    return gid


def check_workflow(name: str) -> str:
    """A workflow name as the definition language allows it."""
    if not NAME_RE.match(name):
        raise ValueError(
            f"invalid workflow name {name!r} (letters, digits and _ - : /, not starting with a digit or -)"
        )
    return name


def parse_date(text: str) -> date:
    """``YYYY-MM-DD`` and nothing else (``date.fromisoformat`` also takes ``20261123``)."""
    try:
        if _DATE_RE.match(text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise ValueError(f"invalid date {text!r} (use YYYY-MM-DD, e.g. 2026-11-23)")


class TriggerPublisher:
    """One connection that advertises Triggers once and publishes any number of them.

    After (re)advertising it waits ADVERTISEMENT_SETTLE seconds before the first publication.
    Reconnects on the next publish after a failure, so a long-running ``wfm schedule`` survives a
    broker restart between two fires."""

    def __init__(self, uri: Brokers, timeout: float = 10.0) -> None:
        self.uri = uri
        self.timeout = timeout
        self._client: BlockingClient | None = None

    def publish(self, workflow: str, gid: str, day: date) -> None:
        """Publish one Trigger; ConnectError, OSError or TimeoutError if the broker cannot take it."""
        if self._client is None:
            client = BlockingClient(self.uri, timeout=self.timeout)
            try:
                client.advertise(trigger_advertisement())
                time.sleep(ADVERTISEMENT_SETTLE)
            except BaseException:
                client.close()
                raise
            self._client = client
        try:
            self._client.publish(trigger(workflow, gid, day))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    def __enter__(self) -> TriggerPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
