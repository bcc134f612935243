"""Failpoints: named places where a test has this process kill itself (SIGKILL), to test recovery
from a crash at exactly that moment rather than wherever a kill from outside happens to land.

The idea is FreeBSD's ``fail(9)`` and etcd's gofail: recovery code is only trusted once a real
process has died at each step it claims to survive (between a snapshot's rename and the new log,
between an outbox's write and the broker's acknowledgement, between two parts of a deployment),
and a unit test that simulates the crash inside one process can miss what a dead process leaves
behind (its locks, its half-written files, its peers' view of it).

``WFM_FAILPOINTS=NAME[:N],...`` in a process's environment arms them when it starts: the N-th
time (default the first) the process reaches ``NAME``, it writes one line to stderr and sends
itself SIGKILL. Unset, as in production, :func:`reach` costs one dictionary lookup. The names are
given where the points are (``grep -rn 'failpoints.reach'``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
from collections import Counter

__all__ = ["ARMED", "armed", "reach"]

log = logging.getLogger(__name__)

_ENTRY = re.compile(r"([A-Za-z][A-Za-z0-9._-]*)(?::([1-9][0-9]{0,8}))?\Z")


def armed(text: str) -> dict[str, int]:
    """The failpoints ``text`` arms, name -> the pass that kills; a malformed entry is ignored
    with a warning (a typo must not stop a broker, and the test that set it then fails)."""
    points: dict[str, int] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        match = _ENTRY.match(entry)
        if match is None:
            log.warning("WFM_FAILPOINTS: ignored %r: not NAME or NAME:N (N from 1)", entry)
            continue
        points[match[1]] = int(match[2] or 1)
    return points


ARMED = armed(os.environ.get("WFM_FAILPOINTS", ""))
_passes: Counter[str] = Counter()


def reach(name: str) -> None:
    """This process is at failpoint ``name``: die here if it is armed for this pass."""
    if name not in ARMED:
        return
    _passes[name] += 1
    if _passes[name] == ARMED[name]:
        os.write(2, f"failpoint {name} (pass {_passes[name]}): killed\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)
