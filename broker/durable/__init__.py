"""What a process keeps on disk to survive a crash: a write-ahead log with group commit and
snapshots. I/O adapters, no asyncio: their owners run the blocking calls in a thread."""

from broker.durable.log import LogCorrupt, LogInUse, WriteAheadLog, replace_atomically

__all__ = ["LogCorrupt", "LogInUse", "WriteAheadLog", "replace_atomically"]
