"""The journal as agents kept it before it stood on :class:`broker.durable.WriteAheadLog`: read
once, on the first start of this version, and converted (:meth:`agents.journal.Journal.recover`).

In the agent's state directory, ``snapshot.json`` held ``{"sequence": N, "state":
Agent.snapshot()}`` and ``journal.jsonl`` one record a line (:mod:`agents.journal_records`, with
``"n"``, its sequence number; journals older still numbered records by line): the records up to
``N`` were in the snapshot. A torn last line (a crash mid-write) is cut off, a record that is not
one skipped with a warning, as that journal did.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

from agents.journal_records import decode
from agents.state import Agent
from broker.errors import LocalError
from broker.language import ParseError

__all__ = ["FILES", "in_use", "replay"]

log = logging.getLogger(__name__)

FILES = ("snapshot.json", "journal.jsonl", ".lock")  # what it left in the state directory


def in_use(state_dir: Path) -> bool:
    """Whether an agent of the version before runs on ``state_dir`` (it holds ``.lock``): a
    killed ``wfm up`` leaves its agents running, and two agents on one journal run jobs twice."""
    try:
        fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def replay(state_dir: Path, agent: Agent) -> int | None:
    """Give ``agent`` (new) the old journal's state: how many tail records were replayed, or
    None if ``state_dir`` holds no old journal."""
    snapshot = _snapshot(state_dir / "snapshot.json")
    try:
        tail = (state_dir / "journal.jsonl").read_bytes()
    except FileNotFoundError:
        if snapshot is None:
            return None
        tail = b""
    included = 0
    if snapshot is not None:
        agent.restore(snapshot["state"])
        included = int(snapshot["sequence"])
    replayed = 0
    for number, line in enumerate(tail.splitlines(keepends=True), 1):
        if not line.endswith(b"\n"):
            log.warning("%s:%d: cut off a torn record", state_dir / "journal.jsonl", number)
            break
        try:
            record = json.loads(line)
            sequence = int(record.get("n", number))
            event, now = decode(record)
        except (ValueError, KeyError, TypeError, ParseError) as error:
            log.warning("%s:%d: skipped a bad record: %s", state_dir / "journal.jsonl", number, error)
            continue
        if sequence > included:
            agent.handle(event, now)
            replayed += 1
    return replayed


def _snapshot(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        snapshot: dict[str, Any] = json.loads(text)
        int(snapshot["sequence"]), snapshot["state"]["installs"]
    except (ValueError, KeyError, TypeError) as error:  # written atomically: not a torn write
        raise LocalError(f"{path}: not an agent snapshot ({error})") from None
    return snapshot
