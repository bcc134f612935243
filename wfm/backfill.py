"""Backfill: one generation of a workflow per date its calendar allows in a range, a few at a time.

Each date's generation has a gid derived from the date (:func:`wfm.slots.backfill_gid`), so a
backfill is resumable without a state file: the workflow's coordinator is asked what it knows of
each gid (``RUNS``), dates whose generation ended are reported as they ended and not started
again, those still running are waited for, and the others are triggered, at most ``concurrency``
running at once. Even a Trigger sent twice (a rerun racing the first, a Trigger published again
because its APPL_START was slow to come) starts nothing twice: the coordinator runs a gid once.

A date a schedule already ran (``wfm schedule``, whose gids are its slots': :func:`wfm.slots.slot_gid`)
is that generation's when the caller names the slots (``scheduled``): it is reported, or waited
for, as the backfill's own, not run a second time.

Limits: "done" is what the coordinator remembers. It lists the outcomes of its last 500
generations (``agents.publishing.MAX_OUTCOMES``); one that ended before those is answered as
``ended`` (status ENDED here: done, outcome unknown) while it remembers it (``--keep-days``);
after that the date runs again. A date whose Triggers start nothing (its coordinator away, or
refusing them) is reported NOT_STARTED after TRIES tries, REPUBLISH seconds apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from broker.client import Subscription
from broker.language import Filter, Predicate
from wfm.operations import NoReply, Session
from wfm.signing import Deployer
from wfm.slots import backfill_gid
from workflow_messages import APPL_END, APPL_START, JOBSTATUS, Calendar, trigger, trigger_advertisement

__all__ = ["ENDED", "MAX_DATES", "NOT_STARTED", "REPUBLISH", "Outcome", "backfill", "backfill_dates"]

MAX_DATES = 3660  # ten years of dates, one backfill
REPUBLISH = 10.0  # seconds without APPL_START after which a date's Trigger is published again
TRIES = 3  # Triggers of one date published without its APPL_START coming: then NOT_STARTED
ENDED = "ENDED"  # the status of a date whose generation ended before, its outcome no longer listed
NOT_STARTED = "NOT_STARTED"  # its coordinator answered none of its Triggers
ASKING = 16  # questions to the coordinator in flight at once


@dataclass(frozen=True)
class Outcome:
    """How one date's generation ended; ``earlier``: before this backfill (a rerun skipped it)."""

    day: date
    gid: str
    status: str
    earlier: bool = False

    def record(self, workflow: str) -> dict[str, Any]:
        return {
            "workflow": workflow,
            "date": self.day.isoformat(),
            "gid": self.gid,
            "status": self.status,
            "earlier": self.earlier,
        }


def backfill_dates(first: date, last: date, calendar: Calendar) -> list[date]:
    """The dates from ``first`` to ``last`` (both included) ``calendar`` allows; ValueError (one
    line) if ``first`` is after ``last`` or the range is longer than MAX_DATES."""
    if first > last:
        raise ValueError(f"--from {first} is after --to {last}")
    count = (last - first).days + 1
    if count > MAX_DATES:
        raise ValueError(f"{count} dates from {first} to {last}: at most {MAX_DATES} in one backfill")
    return [day for n in range(count) if calendar.allows(day := first + timedelta(days=n))]


async def backfill(
    session: Session,
    workflow: str,
    days: Iterable[date],
    sign: Deployer,
    concurrency: int = 2,
    tag: str = "backfill",
    planned: Callable[[int, int], None] = lambda total, earlier: None,
    ended: Callable[[Outcome], None] = lambda outcome: None,
    params: Mapping[str, str] | None = None,
    scheduled: Callable[[date], Iterable[str]] = lambda day: (),
) -> list[Outcome]:
    """Run ``workflow`` once per date of ``days``, at most ``concurrency`` generations at once
    (those found running count), and return every date's outcome, in date order. ``planned(total,
    earlier)`` is told how many dates there are and how many ended before; ``ended`` each
    outcome as it comes (the earlier ones first). ``params``: the run parameters of every
    generation started, checked against the workflow's declarations (BadParams). ``scheduled``:
    the gids a schedule gives a date (its slots'): a date one of them ran is not run again.
    UnknownWorkflow if no agent has the workflow, NoReply if its coordinator does not answer."""
    deployed = await session.deployed(workflow)
    deployed.check(session.timeout)
    values = deployed.resolve(params or {})
    coordinator = deployed.coordinator
    if coordinator is None:
        raise NoReply(f"no answer within {session.timeout:g} s from the coordinator of {workflow}")
    gids = {backfill_gid(day, tag): day for day in days}
    slots = {slot: gid for gid, day in gids.items() for slot in scheduled(day)}  # -> the date's gid
    # subscribed before anything is asked or sent: no start or end falls between
    async with await session.client.subscribe(_starts_and_ends(workflow)) as statuses:
        watch = _Watch(statuses, set(gids) | set(slots))
        reading = asyncio.create_task(watch.read())
        try:
            known = await _known(session, workflow, coordinator, [*gids, *slots])
            runs = {gid: gid for gid in gids}  # the generation that is each date's
            for slot, gid in sorted(slots.items()):
                if slot in known and gid not in known and runs[gid] == gid:
                    runs[gid] = slot
            outcomes: dict[str, Outcome] = {}
            for gid, run in runs.items():
                if (status := known.get(run)) is not None:
                    outcomes[gid] = Outcome(gids[gid], run, status, earlier=True)
            planned(len(gids), len(outcomes))
            for gid in sorted(outcomes):
                ended(outcomes[gid])
            await session.client.advertise(trigger_advertisement())

            running = asyncio.Semaphore(concurrency)

            async def one(gid: str) -> None:
                async def publish() -> None:
                    await _publish(session, sign, workflow, gid, gids[gid], values)

                run = runs[gid]
                async with running:
                    status = await watch.run(run, None if run in known else publish)
                outcomes[gid] = Outcome(gids[gid], run, status)
                ended(outcomes[gid])

            async with asyncio.TaskGroup() as group:
                for gid in sorted(gids):
                    if gid not in outcomes:
                        group.create_task(one(gid))
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
    return [outcomes[gid] for gid in sorted(gids)]


def _starts_and_ends(workflow: str) -> Filter:
    virtual = APPL_START[: APPL_START.index("_") + 1]  # APPL_: APPL_START and APPL_END
    return Filter(
        JOBSTATUS,
        (Predicate("applname", "eq", workflow), Predicate("jobname", "str-prefix", virtual)),
    )


async def _known(session: Session, workflow: str, coordinator: str, gids: list[str]) -> dict[str, str | None]:
    """What the coordinator knows of each gid: its APPL_END's status, None while it runs; a gid it
    does not know is left out."""
    asking = asyncio.Semaphore(ASKING)
    found: dict[str, str | None] = {}

    async def ask(gid: str) -> None:
        async with asking:
            answers = await session.ask("RUNS", {"workflow": workflow, "gid": gid, "limit": 1}, [coordinator])
        if gid in answers[coordinator].get("ended", ()):
            found[gid] = ENDED
        for generation in answers[coordinator]["generations"]:
            if generation["gid"] == gid:
                jobs = generation["jobs"]
                end = jobs.get(APPL_END)
                found[gid] = None if end is None else str(end.get("status"))

    async with asyncio.TaskGroup() as group:
        for gid in gids:
            group.create_task(ask(gid))
    return found


async def _publish(
    session: Session, sign: Deployer, workflow: str, gid: str, day: date, params: Mapping[str, str]
) -> None:
    await session.client.publish(sign.sign_publication(trigger(workflow, gid, day, params=params)))


class _Watch:
    """The starts and ends of the backfill's generations, as they come."""

    def __init__(self, statuses: Subscription, gids: set[str]) -> None:
        self.statuses, self.gids = statuses, gids
        self.started: dict[str, asyncio.Event] = {gid: asyncio.Event() for gid in gids}
        self.ends: dict[str, asyncio.Future[str]] = {}

    def _end(self, gid: str) -> asyncio.Future[str]:
        return self.ends.setdefault(gid, asyncio.get_running_loop().create_future())

    async def read(self) -> None:
        while True:
            publication = (await self.statuses.next()).publication
            gid = str(publication.get("GID"))
            if gid not in self.gids:
                continue
            self.started[gid].set()  # an APPL_END too: an expired Trigger has no APPL_START
            end = self._end(gid)
            if publication.get("jobname") == APPL_END and not end.done():
                end.set_result(str(publication.get("status")))

    async def run(self, gid: str, publish: Callable[[], Any] | None) -> str:
        """Publish (unless None: it runs already) and wait for the end; published again each
        REPUBLISH seconds until the generation starts (the first may reach no coordinator while
        subscriptions settle), at most TRIES times: then NOT_STARTED."""
        end = self._end(gid)
        if publish is None:
            return await end
        for _ in range(TRIES):
            await publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.started[gid].wait(), REPUBLISH)
            if self.started[gid].is_set():
                return await end
        return NOT_STARTED
