"""One broker's part in keeping its site's log: Raft (Ongaro and Ousterhout), sans-IO.

The node never touches a disk, a socket or a clock: every call takes ``now``, and what it decides
comes out of ``ready()`` as one batch the adapter carries out in this order (etcd's ``Ready``):

1. write ``hard_state``, ``snapshot`` (a leader's: it replaces the whole log) and ``entries``
   (dropping what the disk holds from ``entries[0].index`` on) and fsync them;
2. send ``messages``: a vote, a follower's acknowledgement, a leader's entries are said only once
   what they promise is on disk, so a crash can never take back something already said;
3. restore the state machine from ``snapshot`` if there is one, then apply ``committed`` in
   order: entries a majority holds, never to be undone;
4. call ``advance()``: now the node counts its own entries as held.

The log does not grow forever: once the adapter has applied up to an index it may hand the node
its state machine's snapshot there (``compact``); the entries up to it are dropped and the
snapshot stands for them, on the node and on the disk (``SiteLog.compact``). A follower that
lacks entries the leader no longer keeps is sent the snapshot instead (``InstallSnapshot``, one
at a time, again only if unanswered for ``snapshot_timeout`` after the last of it went out:
``snapshot_sending``).

Safety beyond the paper's core, each against a failure the mature systems had:

- **Fixed membership** from the topology: no configuration changes, no joint consensus.
- **Pre-vote** (Raft thesis 9.6): a broker cut off from its site asks whether it would win
  before it raises its term, so it does not force an election when it comes back.
- **Leader stickiness**: a broker that heard from a leader of its term within the election
  timeout neither grants nor pre-grants votes to another candidate (the leader asking for them
  has stopped leading: there is no one to defend); a broker that merely lost its link to the
  leader cannot depose it.
- **A closed link is a hint** (``unlinked``): a leader killed -9 closes its connections at
  once, so its followers stand within half an election timeout, at a random point, instead of
  after a whole one of silence, and stop defending it; a leader whose links to a majority
  closed steps down at once. It moves only when an election starts or a leader steps down, and
  whom a broker that lost the leader too would vote for; it cannot depose a leader a majority
  still hears (their pre-votes are refused), and safety never depends on it.
- **Check quorum**: a leader that has not heard from a majority within half the election timeout
  steps down. Followers wait a whole timeout before they elect another, so the two never both
  think they lead. Every entry point looks first, so a leader frozen for seconds that wakes up
  steps down before it acts on anything (a NATS leader kept believing it led for seconds). It
  then stands again within half an election timeout: most often it is the one that stalled, and
  its followers, still its own, vote it back in a new term; followers of another leader refuse.
- **No-op first**: a new leader commits an entry of its own term before it serves; only then
  does it know everything committed before it (and only entries of its own term are ever
  committed by counting replicas, Raft's figure 8).
- **Terms fence every message**: one from an older term is answered with ours and otherwise
  ignored, so a deposed leader's frames change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from broker.consensus.entries import Entries
from broker.errors import LocalError
from broker.messages.consensus import (
    Append,
    AppendReply,
    ConsensusMessage,
    Entry,
    HardState,
    InstallSnapshot,
    Snapshot,
    VoteReply,
    VoteRequest,
    sender_of,
)

__all__ = ["Config", "Node", "NotLeader", "Ready", "Role"]


class Role(Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class NotLeader(LocalError):
    """Only the leader takes new entries; ``leader`` is who this broker believes leads, if anyone."""

    def __init__(self, me: str, leader: str | None) -> None:
        self.leader = leader
        where = f"; {leader} leads" if leader else "; no leader is known"
        super().__init__(f"{me} does not lead its site{where}")


_NEVER_RAN = HardState()


@dataclass(frozen=True, slots=True)
class Config:
    """``members``: the site's brokers, this one (``me``) among them. Times in seconds: a follower
    that hears no leader for a random time between ``election_timeout`` and twice it starts an
    election; a leader sends at least every ``heartbeat``; a snapshot sent to a follower is sent
    again if it has not answered within ``snapshot_timeout``."""

    me: str
    members: tuple[str, ...]
    election_timeout: float = 1.0
    heartbeat: float = 0.1
    batch: int = 256  # entries per Append
    snapshot_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.me not in self.members or len(set(self.members)) != len(self.members):
            raise ValueError(f"{self.me} must be one of the site's members, each named once: {self.members}")
        if not 0 < self.heartbeat * 2 < self.election_timeout:
            raise ValueError("the heartbeat must be shorter than half the election timeout")
        if self.batch < 1:
            raise ValueError("an Append must be able to carry an entry")
        if self.snapshot_timeout <= 0:
            raise ValueError("a snapshot must be given time to arrive")

    @property
    def peers(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m != self.me)

    @property
    def majority(self) -> int:
        return len(self.members) // 2 + 1


@dataclass
class Ready:
    """What the adapter must do now, in the order of the fields (see the module's docstring)."""

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    messages: list[tuple[str, ConsensusMessage]] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None  # a leader's, installed: written first, restored before applying

    def __bool__(self) -> bool:
        return bool(self.hard_state or self.entries or self.messages or self.committed or self.snapshot)


@dataclass(slots=True)
class _Follower:
    """What a leader knows of one follower: the next index to send, the last it holds, when it
    last answered; ``streaming`` once it took an Append, so entries are sent without waiting for
    each answer (until one is refused: then one at a time, going back, until they agree).
    While a snapshot sent to it (up to ``snapshot``) is unanswered, until ``snapshot_due``, it
    is sent heartbeats only."""

    next: int
    match: int = 0
    heard: float = 0.0
    streaming: bool = False
    snapshot: int = 0
    snapshot_due: float = -float("inf")


class Node:
    """A member of a site. ``state``, ``snapshot`` and ``entries`` (those after the snapshot)
    are what its disk held at start; ``applied``, how far the site's state it restored already
    goes (those entries are not handed out to apply again; at least the snapshot's index: the
    adapter restores its state machine from the snapshot)."""

    election_due: float  # when a follower or candidate stands next (``_reset_election``)

    def __init__(
        self,
        config: Config,
        now: float,
        random: Callable[[], float],
        state: HardState = _NEVER_RAN,
        entries: Sequence[Entry] = (),
        applied: int = 0,
        snapshot: Snapshot | None = None,
    ) -> None:
        self.config = config
        self.random = random
        self.term, self.vote = state.term, state.vote
        self.snapshot = snapshot  # the latest, standing for the entries up to its index
        if snapshot is None:
            self.log = Entries(entries)
        else:
            self.log = Entries(entries, snapshot.index, snapshot.term)
            applied = max(applied, snapshot.index)
        if applied > self.log.last_index:
            raise ValueError(f"applied up to {applied}, but the log ends at {self.log.last_index}")
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self.commit = self.applied = applied
        self.stable = self.log.last_index  # the last index on this broker's disk
        self.votes: set[str] = set()
        self.followers: dict[str, _Follower] = {}
        self.heard_leader = -float("inf")  # when the current leader last spoke to us
        self.heartbeat_due = 0.0
        self._hard_dirty = False
        self._unstable_from = self.log.last_index + 1  # the first index the disk may not hold as we do
        self._written = self.log.last_index  # the last index the last ``ready()`` handed to write
        self._messages: list[tuple[str, ConsensusMessage]] = []
        self._installed: Snapshot | None = None  # a leader's, for the next ``ready()`` to write
        self._now = now  # the latest time an entry point was given
        self._reset_election(now)

    # -- what the adapter calls -----------------------------------------------------------------

    def handle(self, sender: str, message: ConsensusMessage, now: float) -> None:
        """A message from ``sender``, a member of the site."""
        if sender not in self.config.peers:
            raise ValueError(f"{sender} is not a member of the site of {self.config.me}")
        if (named := sender_of(message)) != sender:
            raise ValueError(f"a {type(message).__name__} from {sender} says it is from {named}")
        self._now = now
        self._check_quorum(now)
        if message.term > self.term and not self._ignores_newer(message, now):
            self._become_follower(message.term, None, now)
        if message.term < self.term and not (type(message) is VoteRequest and message.pre_vote):
            self._fence(sender, message)
            return
        _HANDLERS[type(message)](self, sender, message, now)

    def tick(self, now: float) -> None:
        """Time passed: heartbeats, elections, stepping down."""
        self._now = now
        self._check_quorum(now)
        if self.role is Role.LEADER:
            if now >= self.heartbeat_due:
                self._broadcast(now)
        elif now >= self.election_due:
            self._campaign(now, pre_vote=len(self.config.members) > 1)

    def propose(self, data: bytes, now: float) -> Entry:
        """A new entry at the end of the site's log; NotLeader unless this broker leads."""
        self._now = now
        self._check_quorum(now)
        if self.role is not Role.LEADER:
            raise NotLeader(self.config.me, self.leader)
        entry = Entry(self.term, self.log.last_index + 1, data)
        self.log.append(entry)  # sent by the next ``ready()``: one Append for a burst of entries
        return entry

    def ready(self) -> Ready:
        """Everything decided since the last call (see the module's docstring for the order)."""
        for peer, follower in self.followers.items():  # the entries proposed since
            if follower.streaming and follower.next <= self.log.last_index:
                self._send_append(peer, follower)
        ready = Ready(
            hard_state=HardState(self.term, self.vote) if self._hard_dirty else None,
            entries=self.log.between(self._unstable_from, self.log.last_index),
            messages=self._messages,
            committed=self.log.between(self.applied + 1, self.commit),
            snapshot=self._installed,
        )
        self._installed = None
        self._hard_dirty = False
        self._unstable_from = self.log.last_index + 1
        self._messages = []
        self.applied = self.commit
        self._written = self.log.last_index
        return ready

    def has_ready(self) -> bool:
        """Whether ``ready()`` has anything to hand out."""
        return bool(
            self._hard_dirty
            or self._installed
            or self._messages
            or self._unstable_from <= self.log.last_index
            or self.commit > self.applied
            or any(f.streaming and f.next <= self.log.last_index for f in self.followers.values())
        )

    def advance(self, now: float) -> None:
        """The last ``ready()`` is carried out: its entries are on disk (unless a leader has
        since replaced some of them: those are written by the next one)."""
        self._now = now
        if self._unstable_from > self._written:
            self.stable = max(self.stable, self._written)
        if self.role is Role.LEADER:
            self._advance_commit(now)

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The adapter's state machine, applied up to ``index``, is ``data``: the entries up to
        ``index`` are dropped, the snapshot stands for them (and is what a follower behind them
        is sent). The adapter then writes it (``SiteLog.compact``); nothing waits on that, as
        nothing said depends on it. A snapshot no newer than the one held changes nothing (the
        one held is returned)."""
        if not 0 < index <= self.applied:
            raise ValueError(
                f"{self.config.me} cannot compact up to {index}: it applied up to {self.applied}"
            )
        if self.snapshot is not None and index <= self.snapshot.index:
            return self.snapshot
        term = self.log.term_at(index)
        assert term is not None, f"entry {index}, applied, is not in the log"
        self.snapshot = Snapshot(index, term, data)
        self.log.compact(index, term)
        return self.snapshot

    def snapshot_sending(self, peer: str, term: int, index: int, now: float) -> bool:
        """The adapter sends a large snapshot piece by piece as the link drains, which may take
        longer than ``snapshot_timeout``: it tells the node as each piece (up to ``index``, sent
        in ``term``) goes out to ``peer``. Whether it is still wanted: this node leads in
        ``term``, the snapshot is the last it sent ``peer``, and ``peer`` has not answered that
        it holds it. If so, its resend waits ``snapshot_timeout`` from now: the timeout counts
        from the last piece that went out, not from the first (see docs/sites.md)."""
        self._now = now
        self._check_quorum(now)
        follower = self.followers.get(peer)
        if self.role is not Role.LEADER or term != self.term or follower is None:
            return False
        if follower.snapshot != index or follower.match >= index:
            return False
        follower.snapshot_due = max(follower.snapshot_due, now + self.config.snapshot_timeout)
        return True

    def unlinked(self, member: str, term: int, now: float) -> None:
        """A hint, not a fact: this broker's link to ``member`` closed while it was in ``term``.
        A broker killed -9 closes its connections at once, but a network blip closes them too,
        so this changes only when this broker stands or steps down, and whom it defends, never
        what a vote means. A follower whose leader in ``term`` that is stands at a random point
        within half an election timeout (random, so that two followers that lost it together do
        not split the vote) and stops defending it (leader stickiness): a broker that lost it
        too gets our pre-vote and vote. A leader still heard by a majority is not deposed by
        it: they refuse the pre-vote. A leader of ``term`` takes that follower as not heard
        since: one whose links to a majority closed steps down at once, not half an election
        timeout later. A hint about another term changes nothing, nor one about a broker that
        is not our leader, or our follower; a frozen leader gives none (it closes nothing): its
        followers wait out the election timeout."""
        if member not in self.config.peers:
            raise ValueError(f"{member} is not a member of the site of {self.config.me}")
        if type(term) is not int or term < 0:
            raise ValueError(f"a term must be a non-negative integer, not {term!r}")
        self._now = now
        self._check_quorum(now)
        if term != self.term:
            return
        if self.role is Role.LEADER:
            self.followers[member].heard = -float("inf")
            self._check_quorum(now)
        elif self.role is Role.FOLLOWER and self.leader == member:
            self.heard_leader = -float("inf")
            self._stand_soon(now)

    @property
    def leads(self) -> bool:
        return self.role is Role.LEADER

    # -- elections ------------------------------------------------------------------------------

    def _reset_election(self, now: float) -> None:
        self.election_due = now + self.config.election_timeout * (1.0 + self.random())

    def _stand_soon(self, now: float) -> None:
        """Our election at a random point within half an election timeout, unless it is due
        sooner: random, so that two brokers that lost their leader together do not split the
        vote."""
        self.election_due = min(self.election_due, now + self.config.election_timeout * self.random() / 2)

    def _campaign(self, now: float, pre_vote: bool) -> None:
        self._reset_election(now)
        if pre_vote:
            self.role, self.leader = Role.PRE_CANDIDATE, None
            term = self.term + 1  # asked about, not taken
        else:
            self.role, self.leader = Role.CANDIDATE, None
            self.term, self.vote = self.term + 1, self.config.me
            self._hard_dirty = True
            term = self.term
        self.votes = {self.config.me}
        if len(self.votes) >= self.config.majority:  # a site of one
            if pre_vote:
                self._campaign(now, pre_vote=False)
            else:
                self._elected(now)
            return
        request = VoteRequest(term, self.config.me, self.log.last_index, self.log.last_term, pre_vote)
        self._messages += [(peer, request) for peer in self.config.peers]

    def _ignores_newer(self, message: ConsensusMessage, now: float) -> bool:
        """Whether a message of a newer term leaves our term alone: a pre-vote request (nothing
        is decided by it), a granted pre-vote (the term in it is the one we asked about), and a
        vote request while we defend our leader (the candidate is cut off from it, we are not)."""
        if type(message) is VoteRequest:
            return message.pre_vote or self._defends_leader(now, message.candidate)
        return type(message) is VoteReply and message.pre_vote and message.granted

    def _defends_leader(self, now: float, candidate: str) -> bool:
        """Whether we defend a leader against ``candidate`` (leader stickiness): we lead, or we
        heard our leader within the election timeout and the candidate is not that leader (one
        that asks for votes stopped leading: there is no one to defend it from)."""
        if self.role is Role.LEADER:
            return True
        return now - self.heard_leader < self.config.election_timeout and candidate != self.leader

    def _on_vote_request(self, sender: str, request: VoteRequest, now: float) -> None:
        up_to_date = (request.last_term, request.last_index) >= (self.log.last_term, self.log.last_index)
        open_to_it = up_to_date and not self._defends_leader(now, request.candidate)
        if request.pre_vote:
            granted = request.term > self.term and open_to_it
            reply = VoteReply(request.term if granted else self.term, self.config.me, granted, True)
        else:
            free = self.vote in (None, request.candidate)
            granted = request.term == self.term and free and open_to_it
            if granted:
                self.vote = request.candidate
                self._hard_dirty = True
                self._reset_election(now)
            reply = VoteReply(self.term, self.config.me, granted)
        self._messages.append((sender, reply))

    def _on_vote_reply(self, sender: str, reply: VoteReply, now: float) -> None:
        if reply.pre_vote != (self.role is Role.PRE_CANDIDATE) or not reply.granted:
            return
        if self.role is Role.PRE_CANDIDATE and reply.term != self.term + 1:
            return  # an answer to an earlier pre-vote
        if self.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return
        self.votes.add(sender)
        if len(self.votes) >= self.config.majority:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(now, pre_vote=False)
            else:
                self._elected(now)

    def _elected(self, now: float) -> None:
        self.role, self.leader = Role.LEADER, self.config.me
        self.followers = {p: _Follower(self.log.last_index + 1, heard=now) for p in self.config.peers}
        self.log.append(Entry(self.term, self.log.last_index + 1))  # the no-op (see above)
        self._broadcast(now)

    def _become_follower(self, term: int, leader: str | None, now: float) -> None:
        if term != self.term:
            self.term, self.vote = term, None
            self._hard_dirty = True
            self.heard_leader = -float("inf")  # whoever led us led an older term
        self.role, self.leader = Role.FOLLOWER, leader
        self.followers = {}
        self._reset_election(now)

    def _check_quorum(self, now: float) -> None:
        if self.role is not Role.LEADER or len(self.config.members) == 1:
            return
        window = self.config.election_timeout / 2
        heard = 1 + sum(now - f.heard < window for f in self.followers.values())
        if heard < self.config.majority:
            self._become_follower(self.term, None, now)
            # most often it is this broker that stalled (its followers are fine, and still take
            # it for their leader: they grant it their votes): it stands again soon, in a new
            # term, rather than leave the site without a leader for an election timeout
            self._stand_soon(now)

    def _fence(self, sender: str, message: ConsensusMessage) -> None:
        """A message of an older term: its sender learns ours (and steps down); nothing else."""
        if type(message) in (Append, InstallSnapshot):
            self._messages.append((sender, AppendReply(self.term, self.config.me, False, 0)))
        elif type(message) is VoteRequest:
            self._messages.append((sender, VoteReply(self.term, self.config.me, False)))

    # -- replication ----------------------------------------------------------------------------

    def _broadcast(self, now: float) -> None:
        self.heartbeat_due = now + self.config.heartbeat
        for peer, follower in self.followers.items():
            self._send_append(peer, follower)

    def _send_append(self, peer: str, follower: _Follower) -> None:
        if self._now < follower.snapshot_due:  # a snapshot is on its way: a heartbeat only
            heartbeat = Append(
                self.term, self.config.me, self.log.snapshot_index, self.log.snapshot_term, (), self.commit
            )
            self._messages.append((peer, heartbeat))
            return
        if follower.next <= self.log.snapshot_index:  # what it lacks is compacted
            self._send_snapshot(peer, follower)
            return
        prev = follower.next - 1
        prev_term = self.log.term_at(prev)
        assert prev_term is not None, "a follower's next index is past the end of the leader's log"
        entries = self.log.after(prev, self.config.batch)
        self._messages.append(
            (peer, Append(self.term, self.config.me, prev, prev_term, entries, self.commit))
        )
        if follower.streaming:
            follower.next += len(entries)

    def _send_snapshot(self, peer: str, follower: _Follower) -> None:
        snapshot = self.snapshot
        assert snapshot is not None and snapshot.index == self.log.snapshot_index
        message = InstallSnapshot(self.term, self.config.me, snapshot.index, snapshot.term, snapshot.data)
        self._messages.append((peer, message))
        follower.streaming = False
        follower.snapshot, follower.snapshot_due = snapshot.index, self._now + self.config.snapshot_timeout

    def _on_append(self, sender: str, append: Append, now: float) -> None:
        if self.role is not Role.FOLLOWER or self.leader != sender:
            self._become_follower(self.term, sender, now)
        self.heard_leader = now
        self._reset_election(now)
        prev_index, prev_term, entries = append.prev_index, append.prev_term, append.entries
        if prev_index < self.log.snapshot_index:  # what it holds up to there is committed, so the leader's
            entries = entries[self.log.snapshot_index - prev_index :]
            prev_index, prev_term = self.log.snapshot_index, self.log.snapshot_term
        if self.log.term_at(prev_index) != prev_term:
            hint = min(prev_index - 1, self.log.last_index)
            if self.log.term_at(prev_index) is not None:
                hint = self.log.first_of_term(prev_index) - 1
            self._messages.append(
                (sender, AppendReply(self.term, self.config.me, False, max(hint, self.commit)))
            )
            return
        conflict = self.log.conflict(entries)
        if conflict is not None:
            if conflict <= self.commit:
                raise AssertionError(f"leader {sender} contradicts committed entry {conflict}")
            self.log.truncate(conflict)
            self._unstable_from = min(self._unstable_from, conflict)
            self.stable = min(self.stable, conflict - 1)
            for entry in entries[conflict - prev_index - 1 :]:
                self.log.append(entry)
        match = prev_index + len(entries)
        self.commit = max(self.commit, min(append.commit, match))
        self._messages.append((sender, AppendReply(self.term, self.config.me, True, match)))

    def _on_install_snapshot(self, sender: str, message: InstallSnapshot, now: float) -> None:
        """A leader's snapshot: taken only if it goes beyond what this broker committed (a
        committed entry is never taken back, an applied one never undone); the entries after it
        are kept if the log holds its last entry, else the whole log goes. Answered once on disk
        (the next ``ready()`` hands it to write), as an Append would be."""
        if self.role is not Role.FOLLOWER or self.leader != sender:
            self._become_follower(self.term, sender, now)
        self.heard_leader = now
        self._reset_election(now)
        if message.last_index <= self.commit:  # old news (a duplicate, a late copy): never go back
            self._messages.append((sender, AppendReply(self.term, self.config.me, True, self.commit)))
            return
        self.log.compact(message.last_index, message.last_term)
        self.snapshot = self._installed = message.snapshot
        self.commit = self.applied = message.last_index
        self._unstable_from = message.last_index + 1  # what is kept after it is written again with it
        self.stable = message.last_index
        self._messages.append((sender, AppendReply(self.term, self.config.me, True, message.last_index)))

    def _on_append_reply(self, sender: str, reply: AppendReply, now: float) -> None:
        if self.role is not Role.LEADER:
            return
        follower = self.followers[sender]
        follower.heard = now
        if reply.success:
            if reply.match >= follower.snapshot:  # the snapshot is there (or it did not need one)
                follower.snapshot_due = -float("inf")
            follower.streaming = now >= follower.snapshot_due
            if reply.match > follower.match:
                follower.match = reply.match
                follower.next = max(follower.next, reply.match + 1)
                self._advance_commit(now)
        elif now < follower.snapshot_due:
            return  # refusing the heartbeats sent while its snapshot is on its way
        elif reply.match >= follower.match:  # (a refusal below what it took is an old answer)
            follower.streaming = False
            follower.next = max(follower.match + 1, min(follower.next - 1, reply.match + 1))
            self._send_append(sender, follower)

    def _advance_commit(self, now: float) -> None:
        """The newest entry of this term that a majority holds (ours counted once on disk); the
        followers are told at once, so they can apply it (and serve it) without waiting for a
        heartbeat."""
        matches = sorted([self.stable, *(f.match for f in self.followers.values())], reverse=True)
        candidate = matches[self.config.majority - 1]
        if candidate > self.commit and self.log.term_at(candidate) == self.term:
            self.commit = candidate
            self._broadcast(now)


_HANDLERS: dict[type, Callable[[Node, str, ConsensusMessage, float], None]] = {
    VoteRequest: Node._on_vote_request,  # type: ignore[dict-item]
    VoteReply: Node._on_vote_reply,  # type: ignore[dict-item]
    Append: Node._on_append,  # type: ignore[dict-item]
    AppendReply: Node._on_append_reply,  # type: ignore[dict-item]
    InstallSnapshot: Node._on_install_snapshot,  # type: ignore[dict-item]
}
