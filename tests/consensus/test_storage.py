"""A site member's consensus state on the write-ahead log: what was written is what a restart
finds, a leader's cut included; and a site whose brokers keep their logs in files survives the
simulator's chaos as one that keeps them in memory does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker.consensus import Entry, HardState, Recovered, Snapshot
from broker.consensus.storage import SiteLog
from broker.durable.log import LogCorrupt, WriteAheadLog
from broker.errors import LocalError
from broker.sim.site import SiteSim


def reopened(directory: Path, checkpoint_every: int = 10_000) -> tuple[HardState, list[Entry]]:
    log = SiteLog(directory, checkpoint_every=checkpoint_every)
    try:
        return log.recover()
    finally:
        log.close()


def test_what_is_written_is_what_a_restart_finds(tmp_path: Path) -> None:
    log = SiteLog(tmp_path)
    assert log.recover() == (HardState(), [])
    log.write(HardState(1, "b1"), [Entry(1, 1), Entry(1, 2, b"x")])
    log.write(HardState(2, None), [])
    log.write(None, [Entry(2, 3, b"y")])
    log.close()
    assert reopened(tmp_path) == (HardState(2, None), [Entry(1, 1), Entry(1, 2, b"x"), Entry(2, 3, b"y")])


def test_entries_replace_the_log_from_their_first_index(tmp_path: Path) -> None:
    """A follower's log cut where a new leader's disagrees, and extended from there."""
    log = SiteLog(tmp_path)
    log.recover()
    log.write(HardState(1, "b1"), [Entry(1, i) for i in range(1, 6)])
    log.write(HardState(2, "b2"), [Entry(2, 3, b"new"), Entry(2, 4)])
    log.close()
    state, entries = reopened(tmp_path)
    assert state == HardState(2, "b2")
    assert [(e.index, e.term, e.data) for e in entries] == [
        (1, 1, b""),
        (2, 1, b""),
        (3, 2, b"new"),
        (4, 2, b""),
    ]


def test_a_checkpoint_bounds_the_replay_and_keeps_everything(tmp_path: Path) -> None:
    log = SiteLog(tmp_path, checkpoint_every=3)
    log.recover()
    for index in range(1, 11):
        log.write(HardState(index, "b1"), [Entry(index, index, b"%d" % index)])
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("snap-"))  # checkpointed
    state, entries = reopened(tmp_path, checkpoint_every=3)
    assert state == HardState(10, "b1") and [e.data for e in entries] == [b"%d" % i for i in range(1, 11)]


def test_a_record_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    wal.append(b"\x93\xa7entries\x05\x90")  # entries from 5 after an empty log
    wal.commit()
    wal.close()
    with pytest.raises(
        LogCorrupt, match="a consensus record cannot be read: entries from 5 after a log of 0"
    ):
        reopened(tmp_path)


def loaded(directory: Path, checkpoint_every: int = 10_000) -> Recovered:
    log = SiteLog(directory, checkpoint_every=checkpoint_every)
    try:
        return log.load()
    finally:
        log.close()


def test_a_compacted_log_restarts_from_its_snapshot_and_the_entries_after_it(tmp_path: Path) -> None:
    log = SiteLog(tmp_path)
    assert log.load() == Recovered(HardState(), None, [])
    log.write(HardState(1, "b1"), [Entry(1, i, b"%d" % i) for i in range(1, 6)])
    log.compact(Snapshot(3, 1, b"state@3"))
    assert [e.index for e in log.entries] == [4, 5]
    log.write(HardState(2, None), [Entry(2, 5, b"new"), Entry(2, 6)])  # a cut after the snapshot
    log.compact(Snapshot(2, 1, b"older"))  # no newer than the log's: nothing changes
    log.close()
    found = loaded(tmp_path)
    assert found.state == HardState(2, None) and found.snapshot == Snapshot(3, 1, b"state@3")
    assert found.entries == [Entry(1, 4, b"4"), Entry(2, 5, b"new"), Entry(2, 6)]
    with pytest.raises(LocalError, match="the site's log is compacted: load\\(\\) gives its snapshot too"):
        reopened(tmp_path)


def test_a_compaction_drops_the_entries_from_the_disk(tmp_path: Path) -> None:
    log = SiteLog(tmp_path)
    log.load()
    log.write(HardState(1, "b1"), [Entry(1, i, b"x" * 1000) for i in range(1, 101)])
    before = sum(p.stat().st_size for p in tmp_path.iterdir())
    log.compact(Snapshot(100, 1, b"small"))
    log.write(None, [Entry(1, 101)])
    log.compact(Snapshot(101, 1, b"small"))  # the write-ahead log keeps one generation before
    log.close()
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < before / 10
    assert loaded(tmp_path) == Recovered(HardState(1, "b1"), Snapshot(101, 1, b"small"), [])


def test_a_leader_s_snapshot_replaces_the_whole_log(tmp_path: Path) -> None:
    log = SiteLog(tmp_path)
    log.load()
    log.write(HardState(1, "b1"), [Entry(1, i) for i in range(1, 4)])
    log.write(HardState(2, None), [Entry(2, 9, b"nine")], Snapshot(8, 2, b"state@8"))
    log.write(None, [Entry(2, 10)])
    log.close()
    assert loaded(tmp_path) == Recovered(
        HardState(2, None), Snapshot(8, 2, b"state@8"), [Entry(2, 9, b"nine"), Entry(2, 10)]
    )


@pytest.mark.parametrize(
    ("act", "message"),
    [
        (
            lambda log: log.compact(Snapshot(9, 1, b"")),
            "snapshot 9 \\(term 1\\) is of no entry the log holds",
        ),
        (
            lambda log: log.compact(Snapshot(3, 2, b"")),
            "snapshot 3 \\(term 2\\) is of no entry the log holds",
        ),
        (lambda log: log.write(None, [], Snapshot(1, 1, b"")), "snapshot 1 is older than the log's \\(2\\)"),
        (lambda log: log.write(None, [Entry(1, 5)], Snapshot(3, 1, b"")), "entries from 5 after a log of 3"),
    ],
)
def test_a_snapshot_that_does_not_fit_the_log_is_refused(tmp_path: Path, act: object, message: str) -> None:
    log = SiteLog(tmp_path)
    log.load()
    log.write(HardState(1, "b1"), [Entry(1, i) for i in range(1, 4)])
    log.compact(Snapshot(2, 1, b""))
    with pytest.raises(ValueError, match=message):
        act(log)  # type: ignore[operator]
    log.close()


def test_checkpoints_of_a_compacted_log_keep_its_snapshot(tmp_path: Path) -> None:
    log = SiteLog(tmp_path, checkpoint_every=3)
    log.load()
    log.write(HardState(1, "b1"), [Entry(1, 1)])
    log.compact(Snapshot(1, 1, b"one"))
    for index in range(2, 12):
        log.write(HardState(index, "b1"), [Entry(index, index, b"%d" % index)])
    log.close()
    found = loaded(tmp_path, checkpoint_every=3)
    assert found.snapshot == Snapshot(1, 1, b"one") and found.state == HardState(11, "b1")
    assert [e.index for e in found.entries] == list(range(2, 12))


class FileDisk:
    """A broker's disk as files: a restart reads them again, as a new process would."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = SiteLog(directory, checkpoint_every=50)
        self.log.load()

    def write(self, state: HardState | None, entries: list[Entry], snapshot: Snapshot | None = None) -> None:
        self.log.write(state, entries, snapshot)

    def compact(self, snapshot: Snapshot) -> None:
        self.log.compact(snapshot)

    def load(self) -> Recovered:
        self.log.close()
        self.log = SiteLog(self.directory, checkpoint_every=50)
        return self.log.load()


@pytest.mark.parametrize("seed", range(3))
def test_a_site_whose_logs_are_files_keeps_one_log_under_chaos(tmp_path: Path, seed: int) -> None:
    disks: dict[str, FileDisk] = {}

    def disk(name: str) -> FileDisk:
        disks[name] = FileDisk(tmp_path / name)
        return disks[name]

    site = SiteSim(3, seed, loss=0.05, duplicates=0.05, sudden=0.02, disks=disk)
    site.chaos(6)
    site.settle()
    site.check_converged()
    for found in disks.values():
        found.log.close()
    lengths = {len(reopened(tmp_path / name)[1]) for name in disks}
    assert lengths == {max(site.applied)}  # every member's file holds the whole log


@pytest.mark.parametrize("seed", range(3))
def test_a_site_whose_compacted_logs_are_files_keeps_one_log_under_chaos(tmp_path: Path, seed: int) -> None:
    disks: dict[str, FileDisk] = {}

    def disk(name: str) -> FileDisk:
        disks[name] = FileDisk(tmp_path / name)
        return disks[name]

    site = SiteSim(3, seed, loss=0.05, duplicates=0.05, sudden=0.02, disks=disk, compact_every=10)
    site.chaos(6)
    site.settle()
    site.check_converged()
    for found in disks.values():
        found.log.close()
    for name in disks:
        recovered = loaded(tmp_path / name)
        assert (
            recovered.snapshot is not None
            and recovered.snapshot.data in site.snapshots[recovered.snapshot.index]
        )
        assert recovered.snapshot.index + len(recovered.entries) == max(site.applied)


COMPACTING = """
import sys
from pathlib import Path
from broker.consensus import Entry, HardState, Snapshot
from broker.consensus.storage import SiteLog
log = SiteLog(Path(sys.argv[1]))
log.load()
log.write(HardState(1, "b1"), [Entry(1, i, b"%d" % i) for i in range(1, 6)])
log.compact(Snapshot(3, 1, b"state@3"))  # the process is killed in here
log.write(None, [Entry(1, 6, b"6")])
"""


@pytest.mark.parametrize("point", ["wal.checkpoint.snapshot", "wal.checkpoint.log"])
def test_a_member_killed_mid_compaction_restarts_with_its_whole_log(tmp_path: Path, point: str) -> None:
    """Killed -9 between the steps of a compaction (the new snapshot renamed into place, or the
    new log generation made too), a member restarts from the snapshot and the entries after it:
    every entry it wrote is there, inside the snapshot or after it, and nothing after the kill."""
    done = subprocess.run(
        [sys.executable, "-c", COMPACTING, str(tmp_path)],
        env={**os.environ, "WFM_FAILPOINTS": point},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    found = loaded(tmp_path)
    assert found == Recovered(
        HardState(1, "b1"), Snapshot(3, 1, b"state@3"), [Entry(1, 4, b"4"), Entry(1, 5, b"5")]
    )
