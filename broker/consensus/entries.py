"""A broker's copy of its site's log, in memory: what ``Node`` reasons about.

The copy on disk is the adapter's (it writes what ``Ready`` hands it, in order, before anything
is said about it); this one answers the questions the protocol asks: the term of the entry at an
index, the entries after one, where a leader's entries first disagree with ours.

Once compacted, the log starts after a snapshot: it keeps the snapshot's index and term (the
entry before its first, for the Append that follows it) and the entries after it only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker.messages.consensus import Entry

__all__ = ["Entries"]


class Entries:
    """Entries ``first``..``last``, in order, each term no smaller than the one before; those up
    to ``first - 1`` (``snapshot_index``, of ``snapshot_term``) are compacted into a snapshot."""

    __slots__ = ("_entries", "snapshot_index", "snapshot_term")

    def __init__(
        self, entries: Iterable[Entry] = (), snapshot_index: int = 0, snapshot_term: int = 0
    ) -> None:
        self._entries: list[Entry] = []
        self.snapshot_index, self.snapshot_term = snapshot_index, snapshot_term
        for entry in entries:
            self.append(entry)

    @property
    def first_index(self) -> int:
        """The first index this log holds an entry for (or would: one past the snapshot)."""
        return self.snapshot_index + 1

    @property
    def last_index(self) -> int:
        return self.snapshot_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot_term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index`` (0 for index 0, before the first; the snapshot's
        term at its index), None past the end or before the snapshot (compacted)."""
        if index == self.snapshot_index:
            return self.snapshot_term
        if self.snapshot_index < index <= self.last_index:
            return self._entries[index - self.snapshot_index - 1].term
        return None

    def append(self, entry: Entry) -> None:
        if entry.index != self.last_index + 1 or entry.term < self.last_term:
            raise ValueError(
                f"entry {entry.index} (term {entry.term}) does not follow entry {self.last_index} "
                f"(term {self.last_term})"
            )
        self._entries.append(entry)

    def after(self, index: int, limit: int) -> tuple[Entry, ...]:
        """At most ``limit`` entries after ``index`` (at or after the snapshot's)."""
        start = index - self.snapshot_index
        assert start >= 0, f"entries after {index} are compacted (up to {self.snapshot_index})"
        return tuple(self._entries[start : start + limit])

    def between(self, first: int, last: int) -> list[Entry]:
        """The entries ``first``..``last``, both included (``first`` after the snapshot)."""
        assert first > self.snapshot_index or first > last, f"entry {first} is compacted"
        return self._entries[first - self.snapshot_index - 1 : max(0, last - self.snapshot_index)]

    def truncate(self, index: int) -> None:
        """Drop the entries from ``index`` on (after the snapshot)."""
        assert index > self.snapshot_index, f"entry {index} is compacted"
        del self._entries[index - self.snapshot_index - 1 :]

    def compact(self, index: int, term: int) -> None:
        """Entries up to ``index`` are now a snapshot's, whose last entry is of ``term``: drop
        them; keep those after if the entry at ``index`` is of ``term``, else drop them all (a
        leader's snapshot over a log that disagrees with it)."""
        if index <= self.snapshot_index:
            return
        keep = self._entries[index - self.snapshot_index :] if self.term_at(index) == term else []
        self._entries = keep
        self.snapshot_index, self.snapshot_term = index, term

    def conflict(self, entries: Sequence[Entry]) -> int | None:
        """The index of the first of ``entries`` that this log lacks or holds in another term;
        None if it holds them all."""
        for entry in entries:
            if self.term_at(entry.index) != entry.term:
                return entry.index
        return None

    def first_of_term(self, index: int) -> int:
        """The first index of the run of entries in the term of the entry at ``index``: where a
        follower whose log disagrees there tells the leader to go back to, skipping a whole term
        at a time (never before the first entry held)."""
        term = self.term_at(index)
        while index > self.first_index and self.term_at(index - 1) == term:
            index -= 1
        return index
