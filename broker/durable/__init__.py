"""What a process keeps on disk to survive a crash: a write-ahead log with group commit and
snapshots (``log``: blocking I/O, no asyncio), and where an event loop runs those blocking calls
(``offload``: on the loop while the disk is fast, in a thread when it is not)."""

from broker.durable.log import LogCorrupt, LogInUse, WriteAheadLog, replace_atomically

__all__ = ["LogCorrupt", "LogInUse", "WriteAheadLog", "replace_atomically"]
