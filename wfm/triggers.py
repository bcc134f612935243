"""Starting generations: generation ids, trigger dates, and publishing Triggers.

Shared by ``wfm trigger`` (one Trigger) and ``wfm schedule`` (one per cron fire), so both name
generations and validate input the same way.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path

from broker.client import BlockingClient, Brokers, brokers
from broker.durable import LogInUse
from broker.errors import NoAnswer, RemoteError
from broker.language import Filter, Predicate
from broker.language.values import NAME_RE
from broker.messages.qos import DEFAULT_QOS, Qos, parse_bounded
from wfm.signing import Deployer, signer_of
from wfm.state import state_home
from workflow_messages import (
    APPL_END,
    APPL_START,
    CANCELLED,
    EXPIRED,
    JOBSTATUS,
    check_gid,
    trigger,
    trigger_advertisement,
)
from workflow_messages.overlap import SKIPPED

__all__ = [
    "MAX_TTL",
    "Expired",
    "NotAcknowledged",
    "NotStarted",
    "Skipped",
    "TriggerPublisher",
    "check_gid",
    "check_workflow",
    "default_outbox",
    "new_gid",
    "parse_date",
    "parse_ttl",
]

_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
MAX_TTL = 365 * 86400.0  # seconds: a Trigger meant for next year is a schedule, not a time to live
# seconds past its expiry that a Trigger may still wait in a broker's custody (its QoS ttl): then
# the broker drops it, in silence, but no agent would act on it anyway (an agent refuses a Trigger
# signed longer ago than its --keep-days, 30 by default); until then, a late Trigger reaches its
# coordinator and ends its generation EXPIRED, visibly
CUSTODY_AFTER_EXPIRY = 30 * 86400.0


class NotAcknowledged(NoAnswer):
    """The broker took no Trigger in time, and it waits in the outbox for the next run."""


class NotStarted(RemoteError):
    """No coordinator started the generation: no workflow of that name is deployed, or its
    coordinator is not running. A broker cannot tell (a historian or a monitor subscribes to every
    Trigger), but the coordinator answers every Trigger of its workflow with APPL_START."""


class Expired(NotStarted):
    """The Trigger reached the workflow's coordinator after its expiry (``--ttl``): the generation
    did not start and ended EXPIRED."""


class Skipped(NotStarted):
    """The Trigger reached the workflow's coordinator while as many generations ran as the
    workflow allows, and its ``overlap="skip"``: the generation did not start and ended SKIPPED."""


def default_outbox() -> Path:
    """Where ``wfm trigger`` keeps the Triggers its broker has not acknowledged:
    ``$XDG_STATE_HOME/wfm/trigger`` (``~/.local/state/wfm/trigger`` by default)."""
    return state_home() / "trigger"


def new_gid(now: datetime, suffix: str | None = None) -> str:
    """``20261123-114523-3f9a``: sorts by creation time (to the second), and the random suffix
    keeps two generations started in the same second apart."""
    return f"{now:%Y%m%d-%H%M%S}-{suffix or secrets.token_hex(2)}"


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


def parse_ttl(text: str) -> float:
    """``--ttl``: a duration (``30s``, ``5m``, ``2h``, ``1d``, seconds) above 0 and at most a year."""
    return parse_bounded(text, MAX_TTL, "a time to live")


class TriggerPublisher:
    """One connection that advertises Triggers once and publishes any number of them.

    It publishes right after (re)advertising: a subscription travels towards a publisher only
    once the advertisement has reached the subscriber's broker, but until a broker's neighbour
    has answered an advertisement the broker carries on to it what the advertisement covers
    (stand-ins, docs/overlay.md), so a Trigger behind its advertisement reaches every subscriber.
    Reconnects on the next publish after a failure, so a long-running ``wfm schedule`` survives a
    broker restart between two fires.

    With an ``outbox`` (a directory, one publisher at a time: a second waits up to ``timeout``
    for it), a Trigger is on disk before it is sent, and one the broker did not acknowledge
    stays there: the next publisher on the same outbox re-sends it first, under the same id, so
    the broker drops it if it got through after all (``resent`` counts them).

    Every Trigger is signed (``signer``; by default :func:`wfm.signing.signer_of` the TLS identity
    of ``uri``, else the local deployer key): agents start a generation only for a Trigger signed
    by a deployer, an operator or a scheduler of their CA (or, without TLS, their deployer key),
    so a broker cannot start one. One kept in the outbox is sent again as it was signed."""

    def __init__(
        self, uri: Brokers, timeout: float = 10.0, outbox: Path | None = None, signer: Deployer | None = None
    ) -> None:
        self.uri = uri
        self.timeout = timeout
        self.outbox = outbox
        self.signer = signer or signer_of(brokers(uri).tls)
        self.resent = 0
        self._client: BlockingClient | None = None

    def _connect(self) -> BlockingClient:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return BlockingClient(self.uri, timeout=self.timeout, outbox=self.outbox)
            except LogInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def publish(
        self,
        workflow: str,
        gid: str,
        day: date,
        started_within: float = 0.0,
        ttl: float | None = None,
        signed_at: float | None = None,
        params: Mapping[str, str] | None = None,
    ) -> float | None:
        """Publish one Trigger; ConnectError, OSError or TimeoutError if the broker cannot take it
        (NotAcknowledged if it waits in the outbox). With ``started_within``, NotStarted unless
        the generation's APPL_START comes within that many seconds (Expired if its APPL_END
        EXPIRED comes instead). With ``ttl`` (seconds), the Trigger carries its expiry, this
        clock's now plus ``ttl``, which is returned: a coordinator it reaches later does not start
        the generation but ends it EXPIRED. With ``signed_at`` (epoch seconds, not after now),
        the Trigger is signed as of then, not now (``wfm schedule`` signs a slot's Trigger at the
        slot's time: agents refuse it once it is older than they remember generations).
        ``params``: the run parameters it carries, checked by the caller
        (:func:`workflow_messages.resolve`) and again by every agent."""
        expires = None if ttl is None else time.time() + ttl
        qos = DEFAULT_QOS if ttl is None else Qos(ttl=ttl + CUSTODY_AFTER_EXPIRY)
        if self._client is None:
            client = self._connect()
            try:
                client.advertise(trigger_advertisement())
            except BaseException:
                client.close()
                raise
            self._client = client
        # subscribed before the Trigger goes out: the subscription travels towards the coordinator's
        # old advertisement along the path the Trigger takes after it, so it is there first
        started = self._client.subscribe(_start_of(workflow, gid)) if started_within else None
        try:
            publication = trigger(workflow, gid, day, expires, params)
            if signed_at is None:
                signed = self.signer.sign_publication(publication)
            else:  # agents read a Trigger's sequence as when it was signed (microseconds)
                signed = self.signer.signer.sign_publication(publication, int(signed_at * 1e6))
            self._client.publish(signed, qos)
        except BaseException as error:
            waiting = self._client.stats()["outbox"]
            self.close()
            if waiting and isinstance(error, NoAnswer):
                raise NotAcknowledged(
                    f"{error}; generation {gid} waits in outbox {self.outbox}"
                    " and the next wfm trigger sends it again"
                ) from None
            raise
        self.resent = self._client.stats().get("resent.outbox", 0)
        if started is not None:
            _wait_start(self._client, started, started_within, f"{workflow} generation {gid}")
        return None if expires is None else float(signed["expires"])

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    def __enter__(self) -> TriggerPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait_start(client: BlockingClient, subscription: str, timeout: float, what: str) -> None:
    delivery = client.receive(timeout)
    client.unsubscribe(subscription)
    status = None if delivery is None else delivery.publication.get("status")
    if delivery is not None and status in _NOT_STARTED:
        detail = delivery.publication.get("detail") or status
        raise _NOT_STARTED[str(status)](f"{what} was not started: {detail}")
    if delivery is None:
        raise NotStarted(
            f"nothing started {what} within {timeout:g} s: no workflow of that name is deployed"
            " (wfm deploy), or its coordinator agent is not running; the Trigger stays published"
        )


# APPL_END's status when it comes first: the generation ended without starting (CANCELLED: while
# it waited its turn under the workflow's limit on generations at once)
_NOT_STARTED: dict[str, type[NotStarted]] = {EXPIRED: Expired, SKIPPED: Skipped, CANCELLED: NotStarted}


def _start_of(workflow: str, gid: str) -> Filter:
    """The coordinator's answer to a generation's Trigger: its APPL_START, or its APPL_END if the
    Trigger came too late (a generation that started publishes APPL_END after APPL_START)."""
    equal = {"applname": workflow, "GID": gid}
    predicates = [Predicate(name, "eq", value) for name, value in equal.items()]
    virtual = APPL_START[: APPL_START.index("_") + 1]  # APPL_, which APPL_END starts with too
    assert APPL_END.startswith(virtual)
    return Filter(JOBSTATUS, (*predicates, Predicate("jobname", "str-prefix", virtual)))
