"""Schedule slots: the generation a cron fire starts, named by the fire itself, so that any number
of ``wfm schedule`` processes with the same config start each slot exactly once, with no leader,
lock or database.

A slot is (workflow, fire time). Its gid (:func:`slot_gid`) is a pure function of the slot: every
scheduler that fires it publishes a Trigger with the same gid, and the workflow's coordinator
starts a generation once per gid however often its Trigger comes (it remembers ended generations
for its ``--keep-days``). Each slot's Trigger is also signed *at the slot's time* (its signature's
sequence, which agents read as when it was signed): an agent refuses a Trigger signed longer ago
than its ``--keep-days``, which is exactly how long it remembers a generation, so a slot fired
again after its generation was forgotten (a scheduler back after a month away, catching up) is
refused rather than run twice.

Catch-up (:func:`missed`) fires the slots a scheduler missed while it was down: those after the
last slot it fired (:class:`SlotState`, one small JSON file) and within a bounded window. Pure
apart from the state file; times are passed in.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from broker.messages.qos import parse_bounded
from wfm.state import state_home
from wfm.timetable import Entry, fires
from workflow_messages import check_gid

__all__ = [
    "MAX_CATCH_UP",
    "SlotState",
    "backfill_gid",
    "default_state",
    "missed",
    "parse_catch_up",
    "slot_gid",
]

# the longest --catch-up: well inside the agents' memory of ended generations (--keep-days, 30
# by default), beyond which they refuse a slot's Trigger anyway (it is signed at the slot's time)
MAX_CATCH_UP = 7 * 86400.0


def slot_gid(workflow: str, slot: datetime) -> str:
    """``20261123-060000-3f9a``: the slot's time in UTC (so schedulers on hosts in different time
    zones name the same instant alike, and gids sort by time as :func:`wfm.triggers.new_gid`'s
    do), then 4 hex digits of a hash of the workflow and the instant (a ``wfm trigger`` in the
    same second has a random suffix, so it is very unlikely to take a slot's gid)."""
    if slot.tzinfo is None:
        raise ValueError("a slot's time must carry its time zone")
    utc = slot.astimezone(UTC)
    digest = hashlib.sha256(f"{workflow}\n{utc.isoformat()}".encode()).hexdigest()[:4]
    return check_gid(f"{utc:%Y%m%d-%H%M%S}-{digest}")


def backfill_gid(day: date, tag: str = "backfill") -> str:
    """``20261101-backfill``: the generation ``wfm backfill`` starts for ``day``; rerunning the
    same backfill names the same generations, so their coordinator starts each once."""
    return check_gid(f"{day:%Y%m%d}-{tag}")


def parse_catch_up(text: str) -> float:
    """``--catch-up``: a duration (``30m``, ``6h``, ``2d``) above 0 and at most MAX_CATCH_UP."""
    return parse_bounded(text, MAX_CATCH_UP, "a catch-up window")


def missed(entry: Entry, last: datetime | None, now: datetime, window: float) -> list[datetime]:
    """The slots of ``entry`` its calendar allows after ``last`` (the last slot fired; None: never,
    then none are missed) and before ``now``, but not more than ``window`` seconds back."""
    if last is None:
        return []
    start = max(last + timedelta(microseconds=1), now - timedelta(seconds=window))
    return [at for at, _, _ in fires([entry], start, now)]


def default_state() -> Path:
    """``$XDG_STATE_HOME/wfm/schedule.json``: the last slot fired per workflow."""
    return state_home() / "schedule.json"


class SlotState:
    """The last slot fired per workflow, in a JSON file (``{"PAYROLL": "2026-11-23T06:00:00+00:00"}``),
    replaced whole on each change so a kill leaves the old or the new one. A file that cannot be
    read counts as empty (nothing to catch up), with the reason in :attr:`problem`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None
        self.last: dict[str, datetime] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self.last = {str(w): datetime.fromisoformat(str(at)) for w, at in dict(data).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as error:
            self.problem = f"cannot read {path} ({error}): nothing to catch up"

    def fired(self, workflow: str, slot: datetime) -> None:
        """Note ``slot`` as fired (a slot older than the one noted changes nothing)."""
        if workflow in self.last and self.last[workflow] >= slot:
            return
        self.last[workflow] = slot
        self._write({w: at.isoformat() for w, at in sorted(self.last.items())})

    def _write(self, data: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".schedule-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file)
            os.replace(name, self.path)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
