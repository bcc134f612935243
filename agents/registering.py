"""The agent's registrations at its broker, kept in line with what its state machine wants.

Each request or withdrawal runs as a task of its own, one at a time per registration key, so a
slow broker answer holds up that registration only. The client keeps what is live at the broker
(see :mod:`broker.client.requests`); a registration is requested under a name made from its key
(the same in every run of the agent: a broker that kept the agent's session through a restart
recognises the request it holds), and what the agent knows of it, its id and whether it is
issued, it asks the client by that name: it keeps no copy of its own. The client knows a
subscription's id from its Ack on, so a delivery read with the Ack, before the request returns,
finds its registration.

The agent's own requests (its acknowledgements' and answers' advertisements, its control and query
subscriptions) have fixed names; a broker that refuses to restore one of them after a
reconnection ends the agent (``failed``), rather than leaving it up and deaf.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from agents.envelope import Registration
from agents.state import Agent
from broker.client import Client, RefusedError
from broker.errors import LinkClosed, ParseError
from broker.messages.ids import OverlayId

__all__ = ["CONTROL", "OWN", "QUERY", "Registering"]

log = logging.getLogger(__name__)

CONTROL = "\0control"  # the key of the agent's own AGENT_CTL subscription
QUERY = "\0query"  # the key of its AGENT_QUERY subscription
OWN = {  # the names of the agent's own requests: what each is, in a refusal
    "acks": "advertisement of its acknowledgements",
    "control": "control subscription",
    "answers": "advertisement of its answers",
    "alerts": "advertisement of its alerts",
    "states": "advertisement of its jobs' states",
    "queries": "query subscription",
}
OWN_KEYS = {"control": CONTROL, "queries": QUERY}  # the own subscriptions whose deliveries it reads


class Registering:
    """The requests and withdrawals of ``agent``'s registrations, through ``client`` once it is
    connected."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.client: Client | None = None
        self.requesting: dict[str, asyncio.Task[None]] = {}  # key -> its request or withdrawal under way
        self.by_name: dict[str, str] = {}  # name -> key of the registrations requested (see _name)
        self.failed: asyncio.Future[None] | None = None  # set when the broker drops the agent's own requests

    @property
    def issued(self) -> dict[str, str]:
        """The id of each registration the client holds (acknowledged, not withdrawn), by key."""
        client = self.client
        if client is None:
            return {}
        return {
            key: known for name, key in self.by_name.items() if (known := client.known_id(name)) is not None
        }

    def key_of(self, client: Client, subscription: str) -> str | None:
        """The key a delivery for ``subscription`` (an id) belongs to; None for one the client
        does not hold (withdrawn) and the state machine no longer wants.

        A broker that kept the agent's session through a restart delivers what it held for it
        (a job's firing that came while the agent was away) under the ids it gave the last run,
        maybe before this run has asked for those registrations again: the id ends with the name
        the registration is requested under, the same in every run (:func:`_name`)."""
        name = client.name_of(subscription)
        if name is None:
            return self._wanted_by_name(subscription)
        return OWN_KEYS.get(name) or self.by_name.get(name)

    def _wanted_by_name(self, subscription: str) -> str | None:
        try:
            name = OverlayId.parse(subscription).ref
        except ParseError:
            return None
        return next((key for key in self.agent.wanted if _name(key) == name), None)

    def reconcile(self) -> None:
        """Issue what the state machine wants and is not issued, withdraw what it no longer wants."""
        for key in [*self.issued, *self.agent.wanted]:
            self.register(key)

    def register(self, key: str) -> None:
        """Start the request or withdrawal that brings the broker in line with what the state
        machine wants for ``key``, unless one is under way: when it ends, it looks again. Without
        a link, nothing: the (re)connection does it."""
        client = self.client
        if client is None or not client.connected or key in self.requesting:
            return
        registration = self.agent.wanted.get(key)
        known = client.known_id(_name(key))
        if registration is not None and known is None:
            task = asyncio.create_task(self.request(client, key, registration))
        elif registration is None and known is not None:
            self.by_name.pop(_name(key), None)
            task = asyncio.create_task(self._withdraw(client, key, known))
        else:
            return
        self.requesting[key] = task
        task.add_done_callback(lambda _: self._settled(key, registration is not None))

    def _settled(self, key: str, requested: bool) -> None:
        """The request (or withdrawal) of ``key`` ended: if the state machine changed its mind
        meanwhile, the other one. A refused request is not made again here (it would be refused
        again at once); a reconnection tries it again."""
        del self.requesting[key]
        if (key in self.agent.wanted) != requested:
            self.register(key)

    async def request(self, client: Client, key: str, registration: Registration) -> None:
        name = _name(key)
        self.by_name[name] = key  # before the request: a delivery may come with its Ack
        try:
            if registration.command == "ADVERTISE":
                assert registration.filter is not None
                await client.advertise(registration.filter, name=name)
            elif registration.command == "SUBSCRIBE":
                assert registration.filter is not None
                await client.subscribe(registration.filter, own_queue=False, name=name)
            else:
                assert registration.composite is not None
                await client.subscribe_composite(
                    registration.composite,
                    registration.clear,
                    own_queue=False,
                    name=name,
                    policy=registration.policy,
                    priority=registration.priority,
                )
        except LinkClosed:
            return  # requested again at the reconnection
        except Exception as error:
            log.warning("broker refused %s: %s", _named(key), error)

    async def _withdraw(self, client: Client, key: str, known: str) -> None:
        try:
            await client.withdraw(known)
        except LinkClosed:
            pass  # the broker's next session never hears of it
        except Exception as error:
            log.warning("broker refused to withdraw %s: %s", _named(key), error)

    def unrestored(self, known: str, broker: str, reason: str) -> None:
        """The broker refused a request the client re-sent after a reconnection (the client
        still holds it while it tells)."""
        name = None if self.client is None else self.client.name_of(known)
        if name is None:
            return
        if name in OWN:
            error = RefusedError(
                f"broker {broker} refused to restore agent {self.agent.name}'s {OWN[name]}: {reason}"
            )
            if self.failed is not None and not self.failed.done():
                self.failed.set_exception(error)
            return
        key = self.by_name.get(name)
        if key is None:
            return  # withdrawn meanwhile
        log.warning("broker %s refused to restore %s: %s; requesting it again", broker, _named(key), reason)
        asyncio.get_running_loop().call_soon(self.register, key)  # once the client has let it go

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel what is under way; the tasks, to wait for."""
        tasks = list(self.requesting.values())
        for task in tasks:
            task.cancel()
        return tasks


def _name(key: str) -> str:
    """The ref a registration is requested under, the same in every run of the agent: a broker
    that kept the agent's session through a restart recognises the request it already holds."""
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _named(key: str) -> str:
    """A registration's key as a log line names it: workflow, version, command and job, without
    the filter a per-job command's key ends with (``agents.catalogue.Owner.key``)."""
    return " ".join(key.split(" ", 4)[:4])
