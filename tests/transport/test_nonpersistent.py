"""Non-persistent publications at a broker with a log: not logged, so a restart replays to the
router of a broker that never saw them; their output waits for no commit of its own, and
overtakes none held before it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path

from broker.clock import ManualClock
from broker.language import Publication, parse_filter
from broker.messages import Advertise, Deliver, LinkDown, LinkUp, Message, Publish, Qos, Subscribe
from broker.routing.router import Router
from broker.routing.tables import Output
from broker.transport import persistence
from broker.transport.driver import RouterDriver
from broker.transport.group_commit import GroupCommit
from broker.transport.link import Link
from tests.durable.test_log import reopened
from tests.routing.test_nonpersistent import state
from tests.transport.harness import run

LOG = logging.LoggerAdapter(logging.getLogger("test"), {})
BARE = Qos(persistent=False)
SETUP: list[tuple[Message, str]] = [
    (LinkUp(False), "pub"),
    (LinkUp(False), "sub"),
    (Advertise("a1", parse_filter("[class,eq,t],[n,>,-1]")), "pub"),
    (Subscribe("s1", parse_filter("[class,eq,t]")), "sub"),
]


def stream(bare: bool) -> list[tuple[Message, str]]:
    """Publications 1 to 30, every third non-persistent (left out without ``bare``), the
    subscriber away for the second third of them."""
    out: list[tuple[Message, str]] = []
    for n in range(1, 31):
        if n == 11:
            out.append((LinkDown(), "sub"))
        if n == 21:
            out.append((LinkUp(False, resume=0), "sub"))
        if n % 3 == 0 and not bare:
            continue
        qos = BARE if n % 3 == 0 else Qos()
        publication = Publication("t", {"n": n})
        out.append((Publish(f"{n}@0123456789abcdef0123", publication, ack=False, qos=qos), "pub"))
    return out


def test_a_broker_restored_from_its_log_is_the_one_that_never_saw_its_non_persistent_publications(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        clock = ManualClock()
        log_file = persistence.RouterLog(tmp_path / "b1")
        driver = RouterDriver(Router("B1", session_grace=60), {}, log_file, Counter(), LOG, clock)
        driver.restore(log_file)
        plain = Router("B1", session_grace=60, epoch=driver.router.custody.epoch)
        for message, hop in SETUP + stream(bare=True):
            clock.advance(0.5)
            driver.feed(message, hop)
            if not (type(message) is Publish and not message.qos.persistent):
                plain.handle(message, hop, clock.time())
        log_file.wal.commit()
        assert driver.router.counters["dropped.nonpersistent"] == 3  # those while the subscriber was away
        assert driver.router.counters["delivered"] == 30  # routed to it: 3 dropped on the way out
        live = state(driver.router)
        log_file.close()
        _, records = reopened(tmp_path / "b1")
        assert len(records) == len(SETUP) + len(stream(bare=False))  # none of the 10 bare ones
        again = persistence.RouterLog(tmp_path / "b1")
        restored = again.restore(lambda: Router("B9"))
        again.close()
        assert state(restored) == state(plain) == live
        held = restored.custody.channels["sub"].held  # no Took came: all the persistent ones
        assert list(held) == list(range(1, 21))  # seqs contiguous
        assert [m.publication["n"] for m, _ in held.values()] == [n for n in range(1, 31) if n % 3]  # type: ignore[attr-defined]

    run(main())


def test_the_output_of_an_unlogged_input_waits_only_behind_what_is_held_before_it(tmp_path: Path) -> None:
    sent: list[str] = []

    def send(output: Output, links: object, last_took: object) -> None:
        sent.extend(str(getattr(message, "id", "")) for _, message in output)

    async def main() -> None:
        log_file = persistence.RouterLog(tmp_path)
        log_file.wal.recover()
        commits = GroupCommit(log_file, send, lambda: None, Counter(), LOG)
        links: dict[str, Link | None] = {}
        commits.follow([("sub", _deliver("first"))], links)
        assert sent == ["first"]  # nothing held: at once
        log_file.record(LinkDown(), "x", 1.0)
        commits.hold([("sub", _deliver("held"))], links)
        commits.follow([("sub", _deliver("after"))], links)
        assert sent == ["first"]
        committer = asyncio.ensure_future(commits.run())
        while len(sent) < 3:
            await asyncio.sleep(0.01)
        assert sent == ["first", "held", "after"]
        commits.follow([("sub", _deliver("last"))], links)
        assert sent[-1] == "last"
        committer.cancel()
        log_file.close()

    run(main())


def _deliver(pub_id: str) -> Deliver:
    return Deliver(("s1",), Publication("t", {"n": 1}), pub_id, 1.0, BARE)
