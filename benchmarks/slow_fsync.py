"""Run the ``wfm`` command line in a process whose fsyncs each take MS milliseconds more:
``python benchmarks/slow_fsync.py MS broker ...``. It stands in for a disk whose fsync costs
milliseconds (a spinning disk, a network volume), where group commit is meant to pay off; this
machine's SSD-backed fsync (about 0.1 ms) leaves group commit little to save. Used by
``benchmarks/reliability.py --slow-fsync MS``; a sleep, like an fsync, blocks the calling thread.
"""

from __future__ import annotations

import os
import runpy
import sys
import time


def slowed(sync, delay: float):  # type: ignore[no-untyped-def]
    def slow(fd: int) -> None:
        time.sleep(delay)
        sync(fd)

    return slow


def main() -> None:
    delay = float(sys.argv[1]) / 1000
    if not 0 <= delay < 1:
        raise SystemExit("slow_fsync.py: MS must be from 0 to 999")
    os.fsync = slowed(os.fsync, delay)
    os.fdatasync = slowed(os.fdatasync, delay)
    sys.argv = ["wfm", *sys.argv[2:]]
    runpy.run_module("wfm.cli", run_name="__main__")


if __name__ == "__main__":
    main()
