"""A broker's copy of its site's log, in memory: what ``Node`` reasons about.

The copy on disk is the adapter's (it writes what ``Ready`` hands it, in order, before anything
is said about it); this one answers the questions the protocol asks: the term of the entry at an
index, the entries after one, where a leader's entries first disagree with ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker.consensus.messages import Entry

__all__ = ["Entries"]


class Entries:
    """Entries 1..last, in order, each term no smaller than the one before."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: list[Entry] = []
        for entry in entries:
            self.append(entry)

    @property
    def last_index(self) -> int:
        return len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else 0

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index`` (0 for index 0, before the first), None past the end."""
        if index == 0:
            return 0
        if 0 < index <= len(self._entries):
            return self._entries[index - 1].term
        return None

    def append(self, entry: Entry) -> None:
        if entry.index != self.last_index + 1 or entry.term < self.last_term:
            raise ValueError(
                f"entry {entry.index} (term {entry.term}) does not follow entry {self.last_index} "
                f"(term {self.last_term})"
            )
        self._entries.append(entry)

    def after(self, index: int, limit: int) -> tuple[Entry, ...]:
        """At most ``limit`` entries after ``index``."""
        return tuple(self._entries[index : index + limit])

    def between(self, first: int, last: int) -> list[Entry]:
        """The entries ``first``..``last``, both included."""
        return self._entries[first - 1 : last]

    def truncate(self, index: int) -> None:
        """Drop the entries from ``index`` on."""
        del self._entries[index - 1 :]

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
        at a time."""
        term = self.term_at(index)
        while index > 1 and self.term_at(index - 1) == term:
            index -= 1
        return index
