"""Merging a table folder's small files into one.

Compaction appends one file per day and class each run: a historian compacting every five minutes
writes 288 a day into today's folders, and Spark pays milliseconds for every file it opens, so a
year of those would make every query slow. A folder (``date=D/class=C``) holding ``merge_at`` or
more files under :data:`SMALL` bytes gets those rewritten as one file; larger files stay as they
are, so a row is rewritten a bounded number of times.

The swap never shows a row twice or loses one: the merged file and hard links to the folder's
other files are put in a hidden sibling ``.merge-class=C`` (Spark skips names starting with
``.``); then, with readers shut out by the caller, the folder is renamed ``.old-class=C``, the
sibling takes its name, and the old folder is removed. :func:`recover` completes a swap a crash
interrupted (or drops one that had not started); compaction runs it first.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from pyspark.sql import DataFrame

from wfm.history.landing import fsync_path

__all__ = ["SMALL", "merge_small_files", "recover", "small_files"]

SMALL = 64 * 1024 * 1024  # bytes: a file this big is left alone
_OLD, _MERGED = ".old-", ".merge-"


def small_files(table: Path, merge_at: int) -> dict[Path, list[Path]]:
    """Per folder worth merging, its small files."""
    found = {}
    for folder in table.glob("date=*/class=*"):
        small = sorted(f for f in folder.glob("*.parquet") if f.stat().st_size < SMALL)
        if len(small) >= merge_at:
            found[folder] = small
    return found


def merge_small_files(
    table: Path,
    merge_at: int,
    read: Callable[[list[Path]], DataFrame],
    shut_out_readers: Callable[[], AbstractContextManager[object]],
) -> int:
    """Merge every folder worth it; returns how many. ``read`` gives the rows of some table files
    with their ``date`` and ``class`` partition columns."""
    folders = small_files(table, merge_at)
    if not folders:
        return 0
    staging = table.parent / f".merge-staging-{uuid.uuid4().hex}"
    rows = read([file for files in folders.values() for file in files])
    # one task per folder, hence one file per folder
    rows.repartition("date", "class").write.partitionBy("date", "class").parquet(str(staging))
    for folder, small in folders.items():
        merged = folder.with_name(_MERGED + folder.name)
        merged.mkdir()
        computed = staging / folder.parent.name / folder.name
        for file in computed.glob("*.parquet"):
            file.rename(merged / file.name)
        for file in set(folder.glob("*.parquet")) - set(small):
            os.link(file, merged / file.name)
        for file in merged.iterdir():
            fsync_path(file)
        fsync_path(merged)
    shutil.rmtree(staging)
    with shut_out_readers():
        for folder in folders:
            old = folder.with_name(_OLD + folder.name)
            folder.rename(old)
            folder.with_name(_MERGED + folder.name).rename(folder)
            fsync_path(folder.parent)
            shutil.rmtree(old)
    return len(folders)


def recover(table: Path) -> None:
    """Finish the swaps a crash interrupted: a folder renamed away gets its merged replacement
    back (or itself, should that be missing); merges that never reached the swap are dropped."""
    for old in table.glob(f"date=*/{_OLD}*"):
        folder = old.with_name(old.name.removeprefix(_OLD))
        merged = old.with_name(_MERGED + folder.name)
        if not folder.exists():
            (merged if merged.exists() else old).rename(folder)
            fsync_path(folder.parent)
        if old.exists():
            shutil.rmtree(old)
    for merged in table.glob(f"date=*/{_MERGED}*"):
        shutil.rmtree(merged)
    for staging in table.parent.glob(".merge-staging-*"):
        shutil.rmtree(staging)
