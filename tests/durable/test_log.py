"""The write-ahead log: torn and corrupt tails, snapshots and their crash points, group commit
against concurrent appends, the lock, and a disk that fails mid-write."""

from __future__ import annotations

import errno
import logging
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.durable import LogCorrupt, LogInUse, WriteAheadLog
from broker.durable import log as wal_module

RECORDS = [b"first", b"", b"third record" * 3]


def reopened(directory: Path) -> tuple[bytes | None, list[bytes]]:
    wal = WriteAheadLog(directory)
    try:
        return wal.recover()
    finally:
        wal.close()


def written(directory: Path, records: list[bytes], fsync: wal_module.Fsync = "group") -> None:
    wal = WriteAheadLog(directory, fsync)
    wal.recover()
    for record in records:
        wal.append(record)
    assert wal.commit() == len(records)
    wal.close()


def state(recovered: tuple[bytes | None, list[bytes]]) -> list[bytes]:
    """What the tests' owner rebuilds: its snapshot is the list of every record so far."""
    snapshot, records = recovered
    return ([] if not snapshot else snapshot.split(b",")) + records


@pytest.mark.parametrize("fsync", ["group", "each", "off"])
def test_records_come_back_in_order_after_a_restart(tmp_path: Path, fsync: wal_module.Fsync) -> None:
    written(tmp_path / "wal", RECORDS, fsync)
    written(tmp_path / "wal", [b"more"], fsync)
    assert reopened(tmp_path / "wal") == (None, [*RECORDS, b"more"])


def test_files_are_private_to_their_owner(tmp_path: Path) -> None:
    written(tmp_path / "wal", RECORDS)
    assert stat.S_IMODE((tmp_path / "wal").stat().st_mode) == 0o700
    for path in (tmp_path / "wal").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_torn_last_record_is_cut_off_at_every_byte(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written(tmp_path / "whole", RECORDS)
    data = (tmp_path / "whole" / "log-0").read_bytes()
    start = len(data) - (8 + len(RECORDS[-1]))  # where the last record begins
    for cut in range(start, len(data)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / "log-0").write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, "broker.durable.log"):
            assert reopened(directory) == (None, RECORDS[:-1])
        warnings = [r.getMessage() for r in caplog.records]
        if cut == start:
            assert warnings == []  # the crash came between two records: nothing is torn
        else:
            assert warnings == [
                f"{directory}/log-0: cut off a torn or corrupt tail at offset {start} ({cut - start} bytes)"
            ]
        assert (directory / "log-0").stat().st_size == start
        written(directory, [b"after"])  # the next record starts where the torn one did
        assert reopened(directory) == (None, [*RECORDS[:-1], b"after"])


def test_a_corrupt_record_ends_the_log_there(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    written(tmp_path, RECORDS)
    path = tmp_path / "log-0"
    data = bytearray(path.read_bytes())
    data[8 + len(RECORDS[0]) + 4] ^= 0xFF  # the CRC of the second record
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, "broker.durable.log"):
        assert reopened(tmp_path) == (None, RECORDS[:1])
    assert f"log-0: cut off a torn or corrupt tail at offset {8 + len(RECORDS[0])}" in caplog.text


def test_a_corrupt_record_before_the_last_log_is_an_error(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    wal.append(b"a")
    wal.checkpoint(b"a")  # log-0 (with "a") is kept for falling back
    wal.close()
    (tmp_path / "snap-1").write_bytes(b"garbage")
    data = bytearray((tmp_path / "log-0").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "log-0").write_bytes(data)
    with pytest.raises(LogCorrupt, match=r"log-0: corrupt record at offset 0 before the last log"):
        reopened(tmp_path)


def test_a_checkpoint_bounds_what_a_restart_reads(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    everything: list[bytes] = []
    for round_ in range(3):
        for n in range(5):
            everything.append(f"r{round_}.{n}".encode())
            wal.append(everything[-1])
        wal.commit()
        assert wal.records_since_checkpoint == 5 and wal.log_bytes == sum(8 + len(r) for r in everything[-5:])
        wal.checkpoint(b",".join(everything))
        assert wal.records_since_checkpoint == 0 and wal.log_bytes == 0
    wal.append(b"tail")
    wal.commit()
    wal.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock", "log-2", "log-3", "snap-2", "snap-3"]
    assert reopened(tmp_path) == (b",".join(everything), [b"tail"])


def test_a_corrupt_snapshot_falls_back_to_the_one_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    everything: list[bytes] = []
    for n in range(6):
        everything.append(b"r%d" % n)
        wal.append(everything[-1])
        if n % 2:  # checkpoints with uncommitted records: they must reach the kept log too
            wal.checkpoint(b",".join(everything))
    wal.append(b"tail")
    wal.commit()
    wal.close()
    data = bytearray((tmp_path / "snap-3").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "snap-3").write_bytes(data)
    with caplog.at_level(logging.WARNING, "broker.durable.log"):
        recovered = reopened(tmp_path)
    assert recovered[0] == b"r0,r1,r2,r3" and state(recovered) == [*everything, b"tail"]
    assert "snap-3: corrupt snapshot" in caplog.text


def test_a_corrupt_first_snapshot_falls_back_to_the_empty_state(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    wal.append(b"a")
    wal.checkpoint(b"a")
    wal.append(b"b")
    wal.commit()
    wal.close()
    (tmp_path / "snap-1").write_bytes(b"")
    assert reopened(tmp_path) == (None, [b"a", b"b"])


def test_no_usable_snapshot_is_an_error_not_an_empty_state(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    for n in range(2):
        wal.append(b"r%d" % n)
        wal.checkpoint(b"state%d" % n)
    wal.close()
    for name in ("snap-1", "snap-2"):
        (tmp_path / name).write_bytes(b"wfmsnap1 truncated")
    with pytest.raises(LogCorrupt, match="every snapshot is corrupt"):
        reopened(tmp_path)


def checkpoint_then_crash(directory: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Records a, b, a checkpoint covering them, c, d; the second checkpoint (covering c, d)
    stops at ``step`` as if the machine had stopped there."""
    wal = WriteAheadLog(directory)
    wal.recover()
    for record in (b"a", b"b"):
        wal.append(record)
    wal.checkpoint(b"a,b")
    for record in (b"c", b"d"):
        wal.append(record)
    kept = directory.parent / "kept"
    shutil.copytree(directory, kept)
    with monkeypatch.context() as patch:
        if step == "before the rename":

            def crash(path: Path, data: bytes, sync: bool = True) -> None:
                path.with_name(path.name + ".tmp").write_bytes(data[:5])
                raise OSError("crash")

            patch.setattr(wal_module, "replace_atomically", crash)
        elif step == "before the new log":
            real = wal_module._Segment

            def segment(path: Path, size: int) -> Any:
                if path.name == "log-2":
                    raise OSError("crash")
                return real(path, size)

            patch.setattr(wal_module, "_Segment", segment)
        if step == "before deleting the old files":
            wal.checkpoint(b"a,b,c,d")
            for old in kept.iterdir():
                if not (directory / old.name).exists():
                    shutil.copy(old, directory / old.name)
        else:
            with pytest.raises(OSError, match="crash"):
                wal.checkpoint(b"a,b,c,d")
    wal.close()


@pytest.mark.parametrize("step", ["before the rename", "before the new log", "before deleting the old files"])
def test_a_checkpoint_that_crashed_at_any_step_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    directory = tmp_path / "wal"
    checkpoint_then_crash(directory, monkeypatch, step)
    assert state(reopened(directory)) == [b"a", b"b", b"c", b"d"]
    wal = WriteAheadLog(directory)
    recovered = wal.recover()
    assert not list(directory.glob("*.tmp"))
    wal.append(b"e")
    wal.checkpoint(b",".join([*state(recovered), b"e"]))
    wal.append(b"f")
    wal.commit()
    wal.close()
    assert state(reopened(directory)) == [b"a", b"b", b"c", b"d", b"e", b"f"]


class SlowFile:
    """A segment file whose writes wait for ``go``, or fail with ENOSPC after ``room`` bytes."""

    def __init__(self, real: Any, room: int | None = None) -> None:
        self.real, self.room = real, room
        self.writing, self.go = threading.Event(), threading.Event()
        self.go.set()

    def write(self, data: memoryview) -> int:
        self.writing.set()
        assert self.go.wait(10)
        if self.room is not None:
            if self.room == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            data = data[: self.room]
            self.room -= len(data)
        return int(self.real.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_records_appended_during_a_commit_go_with_the_next_one(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.recover()
    assert wal._segment is not None
    slow = wal._segment.file = SlowFile(wal._segment.file)
    slow.go.clear()
    wal.append(b"1")
    counts: list[int] = []
    committing = threading.Thread(target=lambda: counts.append(wal.commit()))
    committing.start()
    assert slow.writing.wait(10)
    wal.append(b"2")  # does not wait for the commit's write
    wal.append(b"3")
    slow.go.set()
    committing.join(10)
    assert counts == [1] and wal.commit() == 2
    wal.close()
    assert reopened(tmp_path) == (None, [b"1", b"2", b"3"])


def test_appends_from_another_thread_during_commits_are_all_kept_in_order(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path, fsync="off")
    wal.recover()
    records = [b"%d" % n for n in range(3000)]
    done = threading.Event()

    def appender() -> None:
        for record in records:
            wal.append(record)
        done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    committed = 0
    while not done.is_set():
        committed += wal.commit()
    thread.join()
    committed += wal.commit()
    wal.close()
    assert committed == len(records)
    assert reopened(tmp_path) == (None, records)


@pytest.mark.parametrize("fsync", ["group", "each"])
def test_a_full_disk_fails_the_commit_and_the_next_one_writes_what_was_missing(
    tmp_path: Path, fsync: wal_module.Fsync
) -> None:
    wal = WriteAheadLog(tmp_path, fsync)
    wal.recover()
    wal.append(b"committed")
    wal.commit()
    assert wal._segment is not None
    committed = wal._segment.size
    real = wal._segment.file
    wal._segment.file = SlowFile(real, room=12)  # the next record's header and a few bytes fit
    for record in (b"one", b"two which is longer", b"three"):
        wal.append(record)
    with pytest.raises(OSError, match="No space left"):
        wal.commit()
    assert (tmp_path / "log-0").stat().st_size in (committed, committed + 11)  # one whole record in "each"
    wal.append(b"four")
    wal._segment.file = real  # room again
    assert wal.commit() == (4 if fsync == "group" else 3)
    wal.close()
    assert reopened(tmp_path) == (None, [b"committed", b"one", b"two which is longer", b"three", b"four"])


def test_one_process_per_directory(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal")
    with pytest.raises(LogInUse, match=rf"^{tmp_path}/wal is in use by another process"):
        WriteAheadLog(tmp_path / "wal")
    wal.close()
    WriteAheadLog(tmp_path / "wal").close()  # free again


def test_misuse_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync must be"):
        WriteAheadLog(tmp_path, "sometimes")  # type: ignore[arg-type]
    wal = WriteAheadLog(tmp_path)
    with pytest.raises(RuntimeError, match="recover"):
        wal.commit()
    wal.recover()
    with pytest.raises(RuntimeError, match="once"):
        wal.recover()
    wal.close()


def test_flushed_records_survive_the_process_and_the_next_commit_syncs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flush`` writes without an fsync (an owner whose records need not all be durable at
    once); the next ``commit`` syncs them even with nothing new to write, and so does a
    checkpoint."""
    synced: list[int] = []
    fsync = wal_module.os.fsync
    monkeypatch.setattr(wal_module.os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    wal = WriteAheadLog(tmp_path / "wal")
    wal.recover()
    synced.clear()
    wal.append(b"flushed")
    assert wal.flush() == 1 and synced == []
    assert reopened_copy(tmp_path) == (None, [b"flushed"])  # on disk: the process may die now
    synced.clear()  # (the copy's recovery syncs it)
    assert wal.commit() == 0 and len(synced) == 1
    assert wal.commit() == 0 and len(synced) == 1  # nothing flushed since
    wal.append(b"again")
    wal.flush()
    synced.clear()
    wal.checkpoint(b"flushed,again")
    assert synced  # the log before the snapshot first, then the snapshot
    wal.close()
    assert reopened(tmp_path / "wal") == (b"flushed,again", [])


def reopened_copy(tmp_path: Path) -> tuple[bytes | None, list[bytes]]:
    """What a restart would find in ``tmp_path / "wal"``, while its owner still holds it."""
    shutil.rmtree(tmp_path / "copy", ignore_errors=True)
    shutil.copytree(tmp_path / "wal", tmp_path / "copy")
    return reopened(tmp_path / "copy")


def test_a_replaced_file_has_its_mode_whatever_the_umask_and_no_temporary_is_left(tmp_path: Path) -> None:
    target = tmp_path / "cert.pem"
    wal_module.replace_atomically(target, b"old")
    wal_module.replace_atomically(target, b"public", mode=0o644, sync=False)
    assert target.read_bytes() == b"public" and stat.S_IMODE(target.stat().st_mode) == 0o644
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        wal_module.replace_atomically(tmp_path / "folder", b"x")  # the rename fails: nothing is left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cert.pem", "folder"]
