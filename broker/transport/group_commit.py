"""Group commit, beside the broker's log: one fsync for everything that arrived while the last ran.

Every input is logged before the router handles it, and what the router answers waits here until
the commit that covers its input: nothing is acknowledged or forwarded that a crash could take
back. A disk that fails (full, say) holds the outputs back and is retried with backoff; nothing
is acknowledged until it commits. What the router answers to an input that is not logged (a
non-persistent publication) waits for no commit of its own, only behind the outputs before it, so
that it overtakes none of them. Each output keeps the links it was meant for, so the sender can
tell a link replaced during the commit from the one it was for.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping

from broker.durable.offload import Offload
from broker.messages import Took
from broker.routing.tables import Output
from broker.transport.link import Link
from broker.transport.persistence import RouterLog

__all__ = ["GroupCommit", "Held", "Send"]

Held = tuple[Output, dict[str, Link | None]]  # an output, with the links it was meant for
Send = Callable[[Output, Mapping[str, Link | None], Mapping[str, Took]], None]


class GroupCommit:
    def __init__(
        self,
        log_file: RouterLog,
        send: Send,
        checkpoint: Callable[[], None],
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.log_file = log_file
        self.send = send  # an output, its links, and the last Took to each peer of the whole group
        self.checkpoint = checkpoint  # a snapshot of the state the log has reached
        self.counters = counters
        self.log = log
        self.offload = Offload()  # where commits run: on the loop while the disk is fast
        self._held: list[Held] = []
        self._committing = False  # outputs taken from ``_held`` wait for the commit under way
        self._wanted = asyncio.Event()

    def hold(self, output: Output, links: dict[str, Link | None]) -> None:
        """Send ``output`` (to ``links`` as they are now) once the log that has its input commits."""
        self._held.append((output, links))
        self._wanted.set()

    def follow(self, output: Output, links: dict[str, Link | None]) -> None:
        """Send ``output``, whose input is not in the log (``router.unlogged``), after the outputs
        held before it: at once if none is, else with them (it overtakes none)."""
        if self._held or self._committing:
            self._held.append((output, links))
            self._wanted.set()
        else:
            self.send(output, links, {target: out for target, out in output if type(out) is Took})

    async def run(self) -> None:
        failures = 0
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            held, self._held = self._held, []
            self._committing = True
            try:
                await self.offload.run(self.log_file.wal.commit)
            except OSError as error:
                self._committing = False
                self._held[:0] = held
                self._wanted.set()
                self.counters["log_errors"] += 1
                if failures == 0 or failures % 60 == 0:
                    self.log.error(
                        "cannot write the log in %s: %s; holding %d outputs",
                        self.log_file.directory,
                        error,
                        len(self._held),
                    )
                failures += 1
                await asyncio.sleep(min(1.0, 0.05 * 2**failures))
                continue
            failures = 0
            self._committing = False
            self.counters["log_commits"] += 1
            # one Took per peer for the whole group: cumulative, the last covers the others
            last_took = {target: out for output, _ in held for target, out in output if type(out) is Took}
            for output, links in held:
                self.send(output, links, last_took)
            if self.log_file.due():
                try:  # in the loop: the snapshot must be of the state the log has reached
                    self.checkpoint()
                    self.counters["log_checkpoints"] += 1
                except OSError as error:  # the log goes on; the next commit or checkpoint tries again
                    self.counters["log_errors"] += 1
                    self.log.error("cannot checkpoint the log in %s: %s", self.log_file.directory, error)
