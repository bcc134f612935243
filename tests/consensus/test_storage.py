"""A site member's consensus state on the write-ahead log: what was written is what a restart
finds, a leader's cut included; and a site whose brokers keep their logs in files survives the
simulator's chaos as one that keeps them in memory does."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.consensus import Entry, HardState, Recovered, Snapshot
from broker.consensus.storage import SiteLog
from broker.durable.log import LogCorrupt, WriteAheadLog
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
