"""What the brokers of one site say to each other to keep one replicated log.

Every message carries its sender's ``term``: that number is the fence. A broker that was frozen
or cut off wakes up with an old term; the first message it sends is answered with the newer one
and it steps down, and nothing it says in the old term is taken (``Node.handle``).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.messages.ids import PEER_ID

__all__ = [
    "Append",
    "AppendReply",
    "ConsensusMessage",
    "Entry",
    "HardState",
    "InstallSnapshot",
    "Piece",
    "Snapshot",
    "VoteReply",
    "VoteRequest",
    "sender_of",
]


def _count(value: object, what: str) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, not {value!r}")


def _member(value: object, what: str) -> None:
    """A member names itself in its hello: its name in a vote or an Append is checked the same."""
    if type(value) is not str or not PEER_ID.match(value):
        raise ValueError(
            f"{what} must be a member's name (1 to 64 of A-Z a-z 0-9 _ . : -), not {value!r:.80}"
        )


def _flag(value: object, what: str) -> None:
    if type(value) is not bool:
        raise ValueError(f"{what} must be true or false, not {value!r:.80}")


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of the site's log: the term of the leader that wrote it, its position, and
    what the site applies (empty for the no-op a new leader commits before it serves)."""

    term: int
    index: int
    data: bytes = b""

    def __post_init__(self) -> None:
        _count(self.term, "an entry's term")
        _count(self.index, "an entry's index")
        if self.index == 0 or self.term == 0:
            raise ValueError("entries are numbered from 1, in terms from 1")
        if type(self.data) is not bytes:
            raise ValueError(f"an entry's data must be bytes, not {type(self.data).__name__}")


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on disk before a broker says anything that depends on it: the term it is in
    and whom it voted for in that term (a vote forgotten in a crash could be given twice)."""

    term: int = 0
    vote: str | None = None

    def __post_init__(self) -> None:
        _count(self.term, "a term")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The site's state machine as it stood after applying the entries up to ``index`` (of
    ``term``): it stands for those entries, which a member that holds it no longer keeps.
    ``data`` is the state machine's own bytes (``Node`` never looks inside)."""

    index: int
    term: int
    data: bytes

    def __post_init__(self) -> None:
        _count(self.index, "a snapshot's index")
        _count(self.term, "a snapshot's term")
        if self.index == 0 or self.term == 0:
            raise ValueError("a snapshot stands for entries 1 to its index, in terms from 1")
        if type(self.data) is not bytes:
            raise ValueError(f"a snapshot's data must be bytes, not {type(self.data).__name__}")


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A candidate asks for a vote in ``term``. A ``pre_vote`` asks only whether the voter would
    vote (the candidate has not moved to ``term``): a broker cut off from its site asks in vain
    and so never raises the site's term, and never disrupts a leader when it comes back."""

    term: int
    candidate: str
    last_index: int
    last_term: int
    pre_vote: bool = False

    def __post_init__(self) -> None:
        _count(self.term, "term")
        _member(self.candidate, "candidate")
        _count(self.last_index, "last index")
        _count(self.last_term, "last term")
        _flag(self.pre_vote, "pre-vote")


@dataclass(frozen=True, slots=True)
class VoteReply:
    """The answer to a ``VoteRequest``: for a granted pre-vote, the term asked about; otherwise
    the voter's term, so a candidate behind it steps down."""

    term: int
    voter: str
    granted: bool
    pre_vote: bool = False

    def __post_init__(self) -> None:
        _count(self.term, "term")
        _member(self.voter, "voter")
        _flag(self.granted, "granted")
        _flag(self.pre_vote, "pre-vote")


@dataclass(frozen=True, slots=True)
class Append:
    """The leader's entries after ``prev_index`` (none: a heartbeat), and how far the site has
    committed. A follower takes them only if its entry at ``prev_index`` has ``prev_term``."""

    term: int
    leader: str
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int

    def __post_init__(self) -> None:
        _count(self.term, "term")
        _member(self.leader, "leader")
        _count(self.prev_index, "previous index")
        _count(self.prev_term, "previous term")
        _count(self.commit, "commit")
        expected = self.prev_index + 1
        for entry in self.entries:
            if type(entry) is not Entry or entry.index != expected:
                raise ValueError("an Append's entries must follow its previous index, one by one")
            if entry.term > self.term:
                raise ValueError(f"an Append's entries must be of terms up to its own ({self.term})")
            expected += 1


@dataclass(frozen=True, slots=True)
class AppendReply:
    """A follower's answer, sent once what it took is on its disk: ``success`` with the last
    index it now holds as the leader's (``match``), or a refusal with a hint of where its log and
    the leader's may agree (``match``: the leader goes back to it at once, not one by one)."""

    term: int
    follower: str
    success: bool
    match: int

    def __post_init__(self) -> None:
        _count(self.term, "term")
        _member(self.follower, "follower")
        _flag(self.success, "success")
        _count(self.match, "match")


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """The leader's snapshot, for a follower so far behind that the entries it lacks are no
    longer kept (Raft's section 7). The follower takes it only if it goes beyond what it has
    committed, and answers with an ``AppendReply`` whose ``match`` is ``last_index`` once the
    snapshot is on its disk."""

    term: int
    leader: str
    last_index: int
    last_term: int
    data: bytes

    def __post_init__(self) -> None:
        _count(self.term, "term")
        _member(self.leader, "leader")
        Snapshot(self.last_index, self.last_term, self.data)  # the same rules
        if self.last_term > self.term:
            raise ValueError(f"a snapshot's last term must be at most the message's term ({self.term})")

    @property
    def snapshot(self) -> Snapshot:
        return Snapshot(self.last_index, self.last_term, self.data)


ConsensusMessage = VoteRequest | VoteReply | Append | AppendReply | InstallSnapshot


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of a frame too large to be one: a site's state outgrows a frame as its router
    fills (its filter of recent publication ids alone takes a few MiB), and a member behind the
    leader's compaction point must still be sent it. The pieces of one message follow each
    other on a member link, each saying where its bytes go (``at``) in the ``total`` bytes of
    the message's payload: a piece at 0 starts a message (what was read of an earlier one is
    dropped: its sender gave it up), any other must go on where the last one ended, so a lost,
    repeated or forged piece is seen and never put into a message. Other links refuse them."""

    total: int
    at: int
    data: bytes

    def __post_init__(self) -> None:
        _count(self.total, "a piece's total")
        _count(self.at, "a piece's place")
        if type(self.data) is not bytes or not self.data:
            raise ValueError("a piece carries some bytes of a frame")
        if self.at + len(self.data) > self.total:
            raise ValueError(
                f"a piece ends at {self.at + len(self.data)}, past its message's {self.total} bytes"
            )

    @property
    def last(self) -> bool:
        """Whether it ends its message."""
        return self.at + len(self.data) == self.total


def sender_of(message: ConsensusMessage) -> str:
    """The member a consensus message names as its sender; one that arrives from another member
    was forged (the site's links know who is at the other end)."""
    if type(message) is VoteRequest:
        return message.candidate
    if type(message) is VoteReply:
        return message.voter
    if type(message) is AppendReply:
        return message.follower
    return message.leader  # type: ignore[union-attr]  # Append, InstallSnapshot
