"""The router behind a broker's links: inputs logged and handled, outputs sent once committed.

The router is pure; this is what it needs from a process. Every input is handled at the clock's
time; with a log (``persistence``) it is recorded first and the router's output waits for the
group commit that covers it; a non-persistent publication is not recorded (``router.unlogged``),
and the router's answer to it waits only behind the outputs before it (``GroupCommit.follow``).
Of the custody answers to one peer only the last is sent, and what was carried for a link that
has been replaced since is not: the peer's hello on the new link said what it took, and the
router sends the rest again, in order. Our own hellos say what we took as the log has it. A
router bug, or a message that cannot be encoded, costs that message only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Callable, Mapping

from broker.clock import Clock
from broker.errors import LocalError, ProtocolError
from broker.messages import Carry, Deliver, Hello, LinkDown, Message, Publish, Tick, Took
from broker.routing.router import Router, unlogged
from broker.routing.tables import Output
from broker.throttle import LogThrottle
from broker.transport.group_commit import GroupCommit
from broker.transport.link import Link
from broker.transport.persistence import RouterLog

__all__ = ["QUIET", "TICK", "RouterDriver"]

TICK = 1.0  # seconds between the router's Ticks: how late a client session may expire
EXPIRY_LATE = 0.001  # seconds past an expiry its Tick comes: the router's clock must have passed it
QUIET = 0.05  # seconds without an input after which the router's pending index entries are merged


class RouterDriver:
    def __init__(
        self,
        router: Router,
        links: Mapping[str, Link],
        log_file: RouterLog | None,
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
        clock: Clock,
    ) -> None:
        self.router = router
        self.name = router.id  # how our hellos name us: a site's broker, by its own name
        self.site = ""  # and its site, if it is one (``broker.sites.member``)
        self.links = links
        self.log_file = log_file
        self.counters = counters
        self.log = log
        self.clock = clock
        self._sooner = asyncio.Event()  # set when an input brings an expiry before the next Tick
        self._waking_at = float("inf")  # when the ticks wake next (epoch seconds)
        self.commits = (
            None if log_file is None else GroupCommit(log_file, self.send, self._checkpoint, counters, log)
        )
        self.unsendable_log = LogThrottle(burst=1)  # messages too large to send, all together
        self._announced: dict[str, str] = {}  # hop -> the name our hello gave a new channel
        self._taken: dict[str, tuple[str, int]] = {}  # hop -> its channel, last Took sent (logged)
        self._input_seen = asyncio.Event()  # cleared by the settling task (settle_when_quiet)
        # told of each publication sent on to a broker or a client (``broker.transport.trace``)
        self.trace: Callable[[str, Publish | Deliver], None] | None = None

    def restore(self, log_file: RouterLog) -> None:
        """The router as it was, configured as this process was told; every link it had is down
        now (its peers reconnect and resume)."""
        fresh = self.router
        self.router = log_file.restore(lambda: fresh)
        if self.router.id != fresh.id:
            raise LocalError(f"{log_file.directory} holds broker {self.router.id}'s state, not {fresh.id}'s")
        self.router.configure_like(fresh, str(log_file.directory))
        for hop, channel in list(self.router.custody.channels.items()):
            if channel.up:
                self.feed(LinkDown(), hop)
        if self.router.sessions.away:  # those whose grace ran out while it was down go now,
            self.feed(Tick(), "")  # before any link: see ``session_ends``
        for hop, channel in self.router.custody.channels.items():  # all of it in the log; no
            self._taken[hop] = (channel.name, channel.acked)  # stand-in holds a Took back now

    def _checkpoint(self) -> None:
        assert self.log_file is not None
        self.log_file.checkpoint(self.router)

    def feed(self, message: Message, hop: str) -> None:
        self._input_seen.set()
        now = self.clock.time()
        logged = self.log_file is not None and not unlogged(message)  # a non-persistent publication
        if logged:  # is not logged: the router keeps nothing of it
            self.log_file.record(message, hop, now)  # type: ignore[union-attr]
        try:
            output = self.router.handle(message, hop, now)
        except Exception:  # a router bug must cost one message, not the broker
            self.counters["router_errors"] += 1
            self.log.exception("router failed on %s from %s", type(message).__name__, hop)
            return
        if (expiry := self.router.next_expiry()) is not None and expiry < self._waking_at:
            self._sooner.set()  # the ticks wake for it
        if self.commits is None:
            self.send(output, self.links)
        elif output:  # with the links it was meant for: one replaced meanwhile gets it resent
            links = {target: self.links.get(target) for target, _ in output}
            if logged:
                self.commits.hold(output, links)
            else:  # it waits for no commit, only for what came before it
                self.commits.follow(output, links)

    def send(
        self, output: Output, links: Mapping[str, Link | None], last_took: Mapping[str, Took] | None = None
    ) -> None:
        """Onto the links; of the custody answers to one peer only the last matters (of this
        output, or of ``last_took``: a group commit's). What was carried or taken for a link that
        has been replaced since is not sent: the peer's hello on the new link said what it took,
        and what it had not is sent again, in order, by the router; our next Took covers what
        this one did."""
        if last_took is None:
            last_took = {target: out for target, out in output if type(out) is Took}
        for target, out in output:
            kind = type(out)  # exact types: messages are final dataclasses, and this runs per message
            if kind is Took:
                if last_took[target] is not out:
                    continue
                channel = self.router.custody.channels.get(target)
                said = self._taken.get(target, ("", 0))
                if channel is not None and (said[0] != channel.name or out.seq > said[1]):
                    # in the log: a hello may say so (never less: a restore's LinkDowns may have
                    # released a Took that says less than the one ``restore`` found)
                    self._taken[target] = (channel.name, out.seq)
            link = self.links.get(target)
            if (kind is Carry or kind is Took) and link is not links.get(target):
                # a Took too: on the new link it could overtake what we resend there (our answers
                # to what we took), and the peer would end a stand-in too early (``standins``)
                self.counters["unsent.relinked"] += 1
                continue
            try:  # the router never emits LinkUp/LinkDown; a message for a link that went is counted
                if link is None or not link.send(out):  # type: ignore[arg-type]
                    self.counters["dropped.link_gone"] += 1
                    continue
            except (ProtocolError, TypeError) as error:  # it cannot be encoded: the next one can
                self._unsendable(target, out, error)
                continue
            if self.trace is not None and kind is Carry:
                carried = out.message  # type: ignore[union-attr]
                if type(carried) is Publish or type(carried) is Deliver:
                    self.trace(target, carried)

    def _unsendable(self, target: str, message: object, error: Exception) -> None:
        """A message that cannot be encoded (too large for a frame: a composite's firing of many
        publications) must cost itself only, not the committer task or the link it was for."""
        self.counters["dropped.unsendable"] += 1
        if isinstance(message, Carry):
            self.router.custody.unsendable(target, message.seq)
        unlogged = self.unsendable_log.admit("", self.clock.monotonic())
        if unlogged is not None:
            kind = type(message.message if isinstance(message, Carry) else message).__name__
            more = f" ({unlogged} more not logged since the last)" if unlogged else ""
            self.log.error("dropped a %s for %s, it can never be sent: %s%s", kind, target, error, more)

    def hello(self, hop: str) -> Hello:
        """Our hello to ``hop``: the name of our channel with it (a new one's, chosen here, the
        same for every hello until a link takes it, and given to the router with ``LinkUp``, so
        the log has it), the peer's channel we know, and the last seq of it we took: with a log,
        the last ``Took`` we sent, for what we handled since may not be in the log yet."""
        name, peer_epoch, took = self.router.custody.greeting(hop)
        if not name:  # one name until a link takes it: the brokers of a site are dialled at once,
            # and a hello to one that refuses must not rename what the one that serves was told
            name = self._announced.get(hop) or f"{self.router.custody.epoch}:{secrets.token_hex(6)}"
            self._announced[hop] = name
        elif self.log_file is not None:
            logged, seq = self._taken.get(hop, ("", 0))
            took = seq if logged == name else 0
        return Hello("broker", self.name, epoch=name, peer_epoch=peer_epoch, took=took, site=self.site)

    def session_ends(self, hop: str) -> bool:
        """Whether the session kept for ``hop`` ends as its link comes (its grace period is over,
        or will be within a ``TICK``): then the link must not be taken. The hellos named the
        kept channel, and a ``LinkUp`` that withdrew the session as it was handled would open a
        channel of the same name with seqs from 1, which the peer would take for the one it
        resumes (``Sessions.ends_by``). One that is over is withdrawn now (a ``Tick``), so the
        peer's next link is to a new channel, and both sides start afresh."""
        now = self.clock.time()
        sessions = self.router.sessions
        if sessions.ends_by(hop, now):
            self.feed(Tick(), "")
            self.forget_gone()
            return True
        return sessions.ends_by(hop, now + TICK)

    def channel(self, hop: str) -> str:
        """The name of our channel with ``hop`` as the hello that linked it gave it."""
        announced = self._announced.pop(hop, "")
        return self.router.custody.greeting(hop)[0] or announced

    def forget_gone(self) -> None:
        """What we said we took from peers whose channel the router has closed: nothing to resume."""
        for hop in [hop for hop in self._taken if hop not in self.router.custody.channels]:
            del self._taken[hop]

    async def ticks(self) -> None:
        """The router has no clock: on a quiet broker, sessions of peers away expire on these,
        a stand-in that held back a Took for ``ANSWER_WAIT`` goes upstream (``standins``), and
        a message held or retained is dropped when it expires: a Tick comes at the soonest
        expiry (``Router.next_expiry``), else every ``TICK`` while a session or a stand-in may
        end. Only then: each Tick is an input, logged like any other."""
        while True:
            interval = min(TICK, self.router.sessions.grace or TICK)
            expiry = self.router.next_expiry()
            if expiry is not None:
                interval = min(interval, max(0.0, expiry - self.clock.time()) + EXPIRY_LATE)
            self._waking_at = self.clock.time() + interval
            with contextlib.suppress(TimeoutError):  # or sooner: an input brought a sooner expiry
                await asyncio.wait_for(self._sooner.wait(), interval)
            self._sooner.clear()
            expiry = self.router.next_expiry()
            due = expiry is not None and expiry <= self.clock.time()
            if due or self.router.sessions.away or self.router.stand_ins.holding:
                self.feed(Tick(), "")
            self.forget_gone()

    async def settle_when_quiet(self) -> None:
        """A deployment adds thousands of subscriptions, and each publication after it would merge
        a share of their index entries: merged here instead, once no input came for QUIET
        seconds, a publication's share per turn of the loop, stopping at the next input."""
        while True:
            await self._input_seen.wait()
            self._input_seen.clear()
            await asyncio.sleep(QUIET)
            while not self._input_seen.is_set() and self.router.settle():
                await asyncio.sleep(0)
