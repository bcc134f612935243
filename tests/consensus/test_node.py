"""One site's log under the cases Raft's paper and the mature systems' bugs single out, each
driven message by message."""

from __future__ import annotations

import pytest

from broker.consensus import (
    Append,
    AppendReply,
    Config,
    ConsensusMessage,
    Entry,
    HardState,
    InstallSnapshot,
    Node,
    NotLeader,
    Role,
    Snapshot,
    VoteReply,
    VoteRequest,
)
from tests.consensus.cluster import Cluster, E, H


def test_a_site_of_one_leads_itself_and_commits_what_it_wrote() -> None:
    node = Node(Config("a", ("a",), E, H), 0.0, lambda: 0.0)
    node.tick(E + 0.01)
    assert node.leads and node.term == 1
    node.propose(b"x", E + 0.02)
    ready = node.ready()
    assert [e.data for e in ready.entries] == [b"", b"x"] and ready.hard_state == HardState(1, "a")
    node.advance(E + 0.02)
    assert [e.data for e in node.ready().committed] == [b"", b"x"]


def test_one_leader_whose_no_op_and_entries_every_member_applies_in_order() -> None:
    site = Cluster()
    site.elect("a")
    assert [n for n, node in site.nodes.items() if node.leads] == ["a"]
    assert {node.term for node in site.nodes.values()} == {1}
    for data in (b"1", b"2", b"3"):
        site.propose("a", data)
    site.deliver_all()
    site.heartbeat()
    for name in site.names:
        assert [(e.index, e.data) for e in site.applied[name]] == [(1, b""), (2, b"1"), (3, b"2"), (4, b"3")]


def test_a_burst_of_proposals_goes_out_as_one_append_per_follower() -> None:
    site = Cluster()
    site.elect("a")
    for number in range(100):
        site.nodes["a"].propose(b"%d" % number, site.now)
    site.carry_out("a")
    appends = [m for _, _, m in site.wire if isinstance(m, Append)]
    assert [len(a.entries) for a in appends] == [100, 100]


def test_nothing_is_said_before_what_it_promises_is_written() -> None:
    """A vote goes out in the same batch as the vote written, and a follower's acknowledgement
    with the entries it acknowledges: the adapter writes a batch before it sends any of it."""
    node = Node(Config("b", ("a", "b", "c"), E, H), 0.0, lambda: 0.0)
    node.handle("a", VoteRequest(1, "a", 0, 0), 2 * E)
    ready = node.ready()
    assert ready.messages == [("a", VoteReply(1, "b", True))]
    assert ready.hard_state == HardState(1, "a")
    node.advance(2 * E)
    node.handle("a", Append(1, "a", 0, 0, (Entry(1, 1),), 0), 2 * E)
    ready = node.ready()
    assert ready.entries == [Entry(1, 1)] and ready.messages == [("a", AppendReply(1, "b", True, 1))]


def test_a_vote_survives_a_crash() -> None:
    site = Cluster()
    site.now = 2 * E
    site.nodes["b"].handle("a", VoteRequest(1, "a", 0, 0), site.now)
    site.carry_out("b")
    site.start("b")  # killed -9 and back, from its disk
    site.nodes["b"].handle("c", VoteRequest(1, "c", 0, 0), site.now)
    site.carry_out("b")
    assert site.wire[-1] == ("b", "c", VoteReply(1, "b", False))


def test_an_old_leader_is_fenced_by_the_term_and_steps_down() -> None:
    site = Cluster()
    site.elect("a")
    site.now += 0.01
    site.nodes["a"].propose(b"stale", site.now)  # said by a leader that is about to be deposed
    site.carry_out("a")
    stale = [m for m in site.wire if m[0] == "a"]
    site.wire = []
    site.cut = {"a"}
    site.elect("b")  # a is cut off meanwhile; b wins term 2 with c
    site.cut = set()
    assert site.nodes["b"].term == 2 and site.nodes["a"].leads
    for source, target, message in stale:  # a's term-1 Append arrives late at c
        site.nodes[target].handle(source, message, site.now)
        site.carry_out(target)
    assert all(e.data != b"stale" for e in site.nodes["c"].log.between(1, site.nodes["c"].log.last_index))
    site.deliver(target="a", sender="c")  # c's answer names term 2
    assert site.nodes["a"].role is Role.FOLLOWER and site.nodes["a"].term == 2


def test_a_frozen_leader_that_wakes_steps_down_before_it_acts() -> None:
    """It hears nothing while frozen; the first thing it does on waking is see that no majority
    answered it for half an election timeout, so it takes no entry as a leader."""
    site = Cluster()
    site.elect("a")
    site.now += E / 2 + 0.01
    with pytest.raises(NotLeader, match="a does not lead its site; no leader is known"):
        site.nodes["a"].propose(b"x", site.now)
    assert site.nodes["a"].role is Role.FOLLOWER


def test_a_leader_that_stalled_steps_down_and_its_followers_elect_it_again_at_once() -> None:
    """A leader whose process stalled past half an election timeout (its followers fine) steps
    down on waking, and stands at once (its draw is 0 here) in a new term: its followers, which
    heard it lately, do not defend it against itself, so the site has a leader again after a
    round of votes, not after their election timeout."""
    site = Cluster()
    site.elect("a")
    site.propose("a", b"before")
    site.heartbeat()
    site.now += E / 2 + 0.01  # a stalls; b and c heard it a heartbeat before
    site.nodes["a"].tick(site.now)
    site.carry_out("a")
    site.deliver_all()
    assert site.nodes["a"].leads and site.nodes["a"].term == 2
    site.propose("a", b"after")
    site.heartbeat()
    assert [e.data for e in site.applied["c"] if e.data] == [b"before", b"after"]


def test_a_leader_back_after_another_was_elected_cannot_win_its_followers_back() -> None:
    """a froze past the election timeout and b leads term 2: a steps down on waking and stands
    again at once, but b leads and c follows b (heard lately): both refuse it, b stays."""
    site = Cluster()
    site.elect("a")
    site.cut = {"a"}
    site.elect("b")
    site.cut = set()
    site.heartbeat_without("a")
    site.nodes["a"].tick(site.now)
    site.carry_out("a")
    assert any(m.candidate == "a" for _, _, m in site.wire if isinstance(m, VoteRequest))
    site.deliver_all()
    site.heartbeat()
    assert site.nodes["b"].leads and {n.term for n in site.nodes.values()} == {2}


def test_a_leader_that_hears_its_majority_keeps_leading() -> None:
    site = Cluster()
    site.elect("a")
    for _ in range(30):
        site.heartbeat()
    assert site.nodes["a"].leads and site.nodes["a"].term == 1


def test_a_broker_cut_off_does_not_raise_the_term_nor_depose_the_leader() -> None:
    site = Cluster()
    site.elect("a")
    site.cut = {"c"}
    for _ in range(60):  # six election timeouts: c asks for pre-votes again and again, in vain
        site.heartbeat()
    assert site.nodes["c"].term == 1 and site.nodes["c"].role is Role.PRE_CANDIDATE
    site.cut = set()
    site.heartbeat()  # c is back
    assert site.nodes["a"].leads and {n.term for n in site.nodes.values()} == {1}
    assert site.nodes["c"].role is Role.FOLLOWER


def killed(site: Cluster, leader: str, draws: tuple[float, ...] = (0.1, 0.6)) -> None:
    """``leader`` killed -9: cut off, and every other member told its link to it closed; each
    draws its point in the election timeout from ``draws``, in turn."""
    site.cut = {leader}
    followers = [n for n in site.names if n != leader]
    for name, draw in zip(followers, draws, strict=True):
        site.nodes[name].random = lambda draw=draw: draw  # type: ignore[misc]
    for name in site.names:
        if name != leader:
            site.nodes[name].unlinked(leader, site.nodes[name].term, site.now)


def test_a_leader_whose_links_closed_is_replaced_within_half_an_election_timeout() -> None:
    """b stands a twentieth of the timeout later, c three tenths: c grants b's pre-vote and vote
    though it heard the leader a heartbeat ago: the leader closed its link too."""
    site = Cluster()
    site.elect("a")
    site.heartbeat()
    killed(site, "a")
    site.heartbeat()
    assert site.nodes["b"].leads and site.nodes["b"].term == 2
    site.propose("b", b"after")
    site.heartbeat()
    assert [e.data for e in site.applied["b"]][-1] == b"after" == [e.data for e in site.applied["c"]][-1]


def test_a_hint_from_one_follower_does_not_depose_a_leader_its_majority_hears() -> None:
    """b's link to a blipped: b stands at once, but c still hears a, and a leads: both refuse
    b's pre-vote, so no term is raised; b follows a again at its next heartbeat."""
    site = Cluster()
    site.elect("a")
    site.heartbeat()
    site.nodes["b"].unlinked("a", 1, site.now)
    site.heartbeat()
    assert site.nodes["b"].role is Role.FOLLOWER and site.nodes["b"].leader == "a"
    assert any(m == ("b", "c", VoteRequest(2, "b", 1, 1, True)) for m in site.said)
    for _ in range(30):
        site.heartbeat()
    assert site.nodes["a"].leads and {n.term for n in site.nodes.values()} == {1}


def test_a_hint_about_another_term_or_broker_than_our_leader_changes_nothing() -> None:
    site = Cluster()
    site.elect("a")
    site.heartbeat()
    b = site.nodes["b"]
    due, heard = b.election_due, b.heard_leader
    b.unlinked("a", 0, site.now)  # about an older term: a was re-elected since, say
    b.unlinked("c", 1, site.now)  # c does not lead
    site.nodes["a"].unlinked("b", 1, site.now)  # the leader still hears c
    assert (b.election_due, b.heard_leader) == (due, heard) and site.nodes["a"].leads
    site.now += H
    b.tick(site.now)
    assert b.role is Role.FOLLOWER
    with pytest.raises(ValueError, match="z is not a member of the site of b"):
        b.unlinked("z", 1, site.now)
    with pytest.raises(ValueError, match="a term must be a non-negative integer, not -1"):
        b.unlinked("a", -1, site.now)


def test_a_leader_whose_links_to_a_majority_closed_steps_down_at_once() -> None:
    """One closed link leaves it a majority heard (itself and c); a second does not: it steps
    down then, not half an election timeout later. A hint of another term changes nothing."""
    site = Cluster()
    site.elect("a")
    site.heartbeat()
    a = site.nodes["a"]
    a.unlinked("b", 1, site.now)
    a.unlinked("c", 0, site.now)
    assert a.leads
    a.unlinked("c", 1, site.now)
    assert a.role is Role.FOLLOWER and a.term == 1
    with pytest.raises(NotLeader):
        a.propose(b"x", site.now)


@pytest.mark.parametrize(("draws", "split"), [((0.1, 0.6), False), ((0.1, 0.1), True)])
def test_followers_that_lost_their_leader_together_stand_at_random_points(
    draws: tuple[float, float], split: bool
) -> None:
    """Drawn apart, the first to stand wins with the other's votes before the other stands; had
    they drawn the same point, both would ask at once, grant each other's pre-vote, vote for
    themselves and split the vote (another election, an election timeout later)."""
    site = Cluster()
    site.elect("a")
    site.heartbeat()
    killed(site, "a", draws)
    for _ in range(int(E / 2 / H)):
        site.heartbeat()
    candidates = {s for s, _, m in site.said if isinstance(m, VoteRequest) and m.term == 2 and not m.pre_vote}
    assert candidates == ({"b", "c"} if split else {"b"})
    assert site.nodes["b"].leads is not split and not site.nodes["c"].leads


def test_a_follower_that_hears_its_leader_refuses_to_vote_and_keeps_its_term() -> None:
    site = Cluster()
    site.elect("a")
    site.nodes["b"].handle("c", VoteRequest(5, "c", 9, 9), site.now)
    site.carry_out("b")
    assert site.wire[-1] == ("b", "c", VoteReply(1, "b", False))
    assert site.nodes["b"].term == 1


def test_a_candidate_with_an_older_log_is_refused() -> None:
    site = Cluster()
    site.elect("a")
    site.propose("a", b"x")
    site.deliver_all()
    site.now += 3 * E  # the leader is gone
    site.nodes["c"].handle("b", VoteRequest(3, "b", 1, 1), site.now)  # b lacks entry 2
    site.carry_out("c")
    assert site.wire[-1] == ("c", "b", VoteReply(3, "c", False))


def test_entries_of_an_older_term_are_not_committed_by_counting_replicas() -> None:
    """Raft's figure 8: a leader of term 3 finds its entry 2, of term 1, on a majority; it must
    not count it committed (a broker holding an entry 2 of term 2 could still be elected and
    overwrite it), only through an entry of its own term after it."""
    members = ("a", "b", "c", "d", "e")
    node = Node(
        Config("a", members, E, H), 0.0, lambda: 0.0, HardState(2), [Entry(1, 1), Entry(1, 2, b"two")]
    )
    now = 2 * E + 0.01
    node.tick(now)  # pre-votes for term 3
    for voter in ("b", "c"):
        node.handle(voter, VoteReply(3, voter, True, pre_vote=True), now)
    for voter in ("b", "c"):
        node.handle(voter, VoteReply(3, voter, True), now)
    assert node.leads and node.term == 3 and node.log.term_at(3) == 3  # its no-op
    node.ready()
    node.advance(now)
    for follower in ("b", "c"):
        node.handle(follower, AppendReply(3, follower, True, 2), now)
    assert node.commit == 0  # entry 2 is on a, b and c, and still not committed
    for follower in ("b", "c"):
        node.handle(follower, AppendReply(3, follower, True, 3), now)
    assert node.commit == 3
    assert [e.data for e in node.ready().committed] == [b"", b"two", b""]


def test_a_follower_that_diverged_is_repaired_skipping_a_term_at_a_time() -> None:
    site = Cluster()
    site.elect("a")
    site.now += 0.01
    for number in range(50):  # 50 entries that only a holds, in term 1
        site.nodes["a"].propose(b"lost%d" % number, site.now)
    site.carry_out("a")
    site.wire = []
    site.elect("b")  # b leads term 2 with c: entries 2.. differ from a's
    site.wire = []
    site.propose("b", b"kept")
    site.wire = [m for m in site.wire if m[1] == "c"]
    site.deliver_all()
    refusals_before = 0
    site.heartbeat()  # a hears b, its log is cut back to entry 1 and brought level
    refusals = [m for s, t, m in site.wire if isinstance(m, AppendReply) and not m.success]
    assert refusals == [] and refusals_before == 0
    for _ in range(3):
        site.heartbeat()
    a, b = site.nodes["a"], site.nodes["b"]
    assert a.log.between(1, a.log.last_index) == b.log.between(1, b.log.last_index)
    assert [e.data for e in site.applied["a"]][-1] == b"kept"


def test_messages_from_outside_the_site_are_refused() -> None:
    node = Node(Config("a", ("a", "b", "c"), E, H), 0.0, lambda: 0.0)
    with pytest.raises(ValueError, match="z is not a member of the site of a"):
        node.handle("z", VoteRequest(1, "z", 0, 0), 0.0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Entry(0, 1), "entries are numbered from 1, in terms from 1"),
        (lambda: Entry(1, 1, "text"), "an entry's data must be bytes, not str"),
        (lambda: Append(1, "a", 0, 0, (Entry(1, 2),), 0), "must follow its previous index"),
        (lambda: Append(1, "a", 0, 0, (Entry(2, 1),), 0), "of terms up to its own"),
        (lambda: VoteRequest(-1, "a", 0, 0), "term must be a non-negative integer, not -1"),
        (lambda: Config("a", ("b", "c")), "a must be one of the site's members"),
        (lambda: Config("a", ("a",), 1.0, 0.5), "shorter than half the election timeout"),
        (lambda: Config("a", ("a",), snapshot_timeout=0), "a snapshot must be given time to arrive"),
        (lambda: Snapshot(0, 0, b""), "a snapshot stands for entries 1 to its index"),
        (lambda: InstallSnapshot(1, "a", 3, 2, b""), "last term must be at most the message's term"),
        (lambda: InstallSnapshot(1, "a", 3, 1, "text"), "a snapshot's data must be bytes, not str"),  # type: ignore[arg-type]
    ],
)
def test_malformed_messages_and_settings_are_refused(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_a_restart_with_applied_state_hands_out_only_what_follows() -> None:
    entries = [Entry(1, 1), Entry(1, 2, b"x"), Entry(1, 3, b"y")]
    node = Node(Config("a", ("a",), E, H), 0.0, lambda: 0.0, HardState(1, "a"), entries, applied=2)
    node.tick(2 * E)
    node.ready()
    node.advance(2 * E)
    assert [e.data for e in node.ready().committed] == [b"y", b""]
    with pytest.raises(ValueError, match="applied up to 4, but the log ends at 3"):
        Node(Config("a", ("a",), E, H), 0.0, lambda: 0.0, HardState(1, "a"), entries, applied=4)


# -- compaction (Raft's section 7) -------------------------------------------------------------


def follower(entries: list[Entry], commit: int = 0, term: int = 1) -> Node:
    """``b``, a follower of ``a`` in ``term`` holding ``entries``, told ``commit`` by ``a``."""
    node = Node(Config("b", ("a", "b", "c"), E, H), 0.0, lambda: 0.0, HardState(term, "a"), entries)
    node.handle("a", Append(term, "a", len(entries), entries[-1].term if entries else 0, (), commit), 0.0)
    node.ready()
    node.advance(0.0)
    return node


def test_compacting_drops_the_applied_entries_and_keeps_the_rest() -> None:
    site = Cluster()
    site.elect("a")
    for number in range(5):
        site.propose("a", b"%d" % number)
    site.deliver_all()
    a = site.nodes["a"]
    assert a.applied == 6 and a.log.last_index == 6
    snapshot = site.compact("a")
    assert snapshot == Snapshot(6, 1, b"state@6") and a.snapshot == snapshot
    assert a.log.first_index == 7 and a.log.term_at(6) == 1 and a.log.term_at(5) is None
    assert (a.log.last_index, a.log.last_term) == (6, 1)  # what a vote request says is unchanged
    assert site.disks["a"].snapshot == snapshot and site.disks["a"].entries == []
    assert a.compact(3, b"older") is snapshot  # no newer than the one held: nothing changes
    with pytest.raises(ValueError, match="a cannot compact up to 7: it applied up to 6"):
        a.compact(7, b"ahead")
    site.propose("a", b"after")  # the log goes on after the snapshot
    site.deliver_all()
    site.heartbeat()
    assert [e.data for e in site.applied["b"]][-1] == b"after" and a.commit == 7


def test_a_follower_behind_the_compaction_point_installs_the_leader_s_snapshot() -> None:
    site = Cluster()
    site.elect("a")
    site.cut = {"c"}
    for number in range(5):
        site.propose("a", b"%d" % number)
        site.deliver_all()
    site.heartbeat()
    site.compact("a")  # entries 1..6 are gone from a; c holds only the no-op
    site.cut = set()
    site.heartbeat()  # c refuses a's heartbeat, a sends its snapshot, c installs it
    assert site.installed["c"] == [Snapshot(6, 1, b"state@6")]
    assert site.disks["c"].snapshot == Snapshot(6, 1, b"state@6")
    assert site.nodes["c"].applied == 6 and site.nodes["c"].log.first_index == 7
    site.propose("a", b"next")
    site.deliver_all()
    site.heartbeat()
    assert [(e.index, e.data) for e in site.applied["c"]][-1] == (7, b"next")  # only what follows it
    assert all(e.index > 6 for e in site.applied["c"][1:])
    sent = [(s, t, m) for s, t, m in site.said if isinstance(m, InstallSnapshot)]
    assert sent == [("a", "c", InstallSnapshot(1, "a", 6, 1, b"state@6"))]
    assert ("c", "a", AppendReply(1, "c", True, 6)) in site.said


def test_a_snapshot_is_answered_only_once_it_is_on_disk() -> None:
    """The snapshot and the answer come out of one ``ready()``: written before it is said."""
    node = follower([Entry(1, 1)])
    node.handle("a", InstallSnapshot(1, "a", 5, 1, b"five"), 0.1)
    ready = node.ready()
    assert ready.snapshot == Snapshot(5, 1, b"five") and ready.committed == [] and ready.entries == []
    assert ready.messages == [("a", AppendReply(1, "b", True, 5))]
    assert node.applied == node.commit == 5 and node.log.last_index == 5


def snapshot_on_its_way_to_c() -> Cluster:
    """A site whose leader a compacted entries 1..4 while c was cut off: a heartbeat c refuses (it
    lacks entries 2..4) has a send c its snapshot, taken off the wire here."""
    site = Cluster()
    site.elect("a")
    site.cut = {"c"}
    for number in range(3):
        site.propose("a", b"%d" % number)
        site.deliver_all()
    site.compact("a")
    site.cut = set()
    site.now += H
    site.nodes["a"].tick(site.now)
    site.carry_out("a")
    site.deliver(target="c", sender="a")
    site.deliver(target="a", sender="c")
    assert [m for s, t, m in site.wire if t == "c"] == [InstallSnapshot(1, "a", 4, 1, b"state@4")]
    site.wire = [m for m in site.wire if m[1] != "c"]
    return site


def test_a_leader_sends_one_snapshot_at_a_time_and_again_only_when_it_timed_out() -> None:
    site = snapshot_on_its_way_to_c()  # and lost

    def said_to_c() -> list[ConsensusMessage]:
        site.heartbeat_without("c")
        said = [m for s, t, m in site.wire if t == "c"]
        site.wire = [m for m in site.wire if m[1] != "c"]
        return said

    timeout = site.nodes["a"].config.snapshot_timeout
    said = [m for _ in range(int(timeout / H) - 1) for m in said_to_c()]  # c says nothing
    assert len(said) > 10 and not any(isinstance(m, InstallSnapshot) for m in said)  # heartbeats only
    assert {(m.prev_index, m.prev_term) for m in said if isinstance(m, Append)} == {(4, 1)}
    site.nodes["a"].handle("c", AppendReply(1, "c", False, 1), site.now)  # c refuses one of them
    assert site.nodes["a"].ready().messages == []  # answered by nothing: the snapshot is on its way
    said = [m for _ in range(3) for m in said_to_c()]
    assert [m for m in said if isinstance(m, InstallSnapshot)] == [InstallSnapshot(1, "a", 4, 1, b"state@4")]


def test_a_snapshot_streaming_longer_than_its_timeout_is_sent_again_only_once_its_pieces_stop() -> None:
    """A large state goes out piece by piece as the link drains (``broker.sites.pieces``), for
    longer than ``snapshot_timeout``: the adapter tells the node as each piece goes, and the
    resend waits the timeout from the last one; once the follower holds the snapshot, or the
    node no longer leads in the snapshot's term, its stream is not wanted any more."""
    site = snapshot_on_its_way_to_c()  # its pieces start out
    leader = site.nodes["a"]

    def said_to_c(streaming: bool) -> list[ConsensusMessage]:
        if streaming:  # a piece went out
            assert leader.snapshot_sending("c", 1, 4, site.now)
        site.heartbeat_without("c")
        said = [m for s, t, m in site.wire if t == "c"]
        site.wire = [m for m in site.wire if m[1] != "c"]
        return said

    timeout = leader.config.snapshot_timeout
    said = [m for _ in range(int(3 * timeout / H)) for m in said_to_c(streaming=True)]
    assert len(said) > 30 and not any(isinstance(m, InstallSnapshot) for m in said)  # heartbeats only
    said = [m for _ in range(int(timeout / H) - 2) for m in said_to_c(streaming=False)]  # the last piece
    assert not any(isinstance(m, InstallSnapshot) for m in said)  # c is given the timeout to answer
    said = [m for _ in range(4) for m in said_to_c(streaming=False)]
    assert [m for m in said if isinstance(m, InstallSnapshot)] == [InstallSnapshot(1, "a", 4, 1, b"state@4")]
    assert not leader.snapshot_sending("c", 1, 3, site.now)  # not the snapshot on its way
    assert not leader.snapshot_sending("b", 1, 4, site.now)  # b needs none
    leader.handle("c", AppendReply(1, "c", True, 4), site.now)  # c holds it
    assert not leader.snapshot_sending("c", 1, 4, site.now)
    assert leader.followers["c"].snapshot_due == -float("inf")
    leader.handle("b", AppendReply(2, "b", False, 0), site.now)  # a newer term: a no longer leads
    assert not leader.leads and not leader.snapshot_sending("c", 1, 4, site.now)


def test_a_snapshot_whose_answer_is_lost_is_known_installed_from_the_next_heartbeat() -> None:
    site = Cluster()
    site.elect("a")
    site.cut = {"c"}
    for number in range(3):
        site.propose("a", b"%d" % number)
        site.deliver_all()
    site.compact("a")
    site.cut = set()
    site.now += H
    site.nodes["a"].tick(site.now)
    site.carry_out("a")
    site.deliver(target="c", sender="a")  # a heartbeat c refuses
    site.deliver(target="a", sender="c")  # a sends its snapshot
    site.deliver(target="c", sender="a")  # c installs it; its answer is lost
    site.wire = []
    site.heartbeat()  # the heartbeat after the snapshot's index: c holds it, and says so
    site.propose("a", b"next")  # so entries flow to c at once, not after the snapshot timeout
    site.deliver_all()
    assert site.nodes["c"].log.last_index == 5 and site.nodes["a"].followers["c"].match == 5
    assert len([m for _, _, m in site.said if isinstance(m, InstallSnapshot)]) == 1


def test_a_snapshot_no_newer_than_the_commit_is_not_installed() -> None:
    """A late copy of a snapshot: what was committed and applied is never taken back."""
    node = follower([Entry(1, i, b"%d" % i) for i in range(1, 7)], commit=5)
    node.handle("a", InstallSnapshot(1, "a", 4, 1, b"four"), 0.1)
    ready = node.ready()
    assert ready.snapshot is None and node.snapshot is None
    assert node.commit == 5 and node.log.first_index == 1 and node.log.last_index == 6
    assert ready.messages == [("a", AppendReply(1, "b", True, 5))]


def test_a_snapshot_of_an_older_term_is_answered_with_ours_and_ignored() -> None:
    node = follower([Entry(1, 1), Entry(2, 2)], commit=1, term=2)
    node.handle("a", InstallSnapshot(1, "a", 5, 1, b"stale"), 0.1)
    ready = node.ready()
    assert ready.snapshot is None and node.snapshot is None and node.log.last_index == 2
    assert ready.messages == [("a", AppendReply(2, "b", False, 0))]


def test_a_snapshot_keeps_the_entries_after_it_when_the_log_holds_its_last() -> None:
    """Entries acknowledged past the snapshot may be part of a majority: kept (Raft's rule),
    and written again with it, since the snapshot replaces the whole log on disk."""
    node = follower([Entry(1, i, b"%d" % i) for i in range(1, 7)], commit=2)
    node.handle("a", InstallSnapshot(1, "a", 4, 1, b"four"), 0.1)
    ready = node.ready()
    assert ready.snapshot == Snapshot(4, 1, b"four")
    assert [e.index for e in ready.entries] == [5, 6] and node.log.last_index == 6
    assert ready.messages == [("a", AppendReply(1, "b", True, 4))]


def test_a_snapshot_whose_last_entry_the_log_lacks_replaces_the_whole_log() -> None:
    node = follower([Entry(1, i) for i in range(1, 7)], commit=2)
    node.handle("a", InstallSnapshot(2, "a", 4, 2, b"four"), 0.1)  # entry 4 is of term 2, not 1
    ready = node.ready()
    assert ready.snapshot == Snapshot(4, 2, b"four") and ready.entries == []
    assert (node.log.last_index, node.log.last_term) == (4, 2)


def test_an_append_from_before_the_snapshot_is_taken_from_the_snapshot_on() -> None:
    node = follower([Entry(1, 1)])
    node.handle("a", InstallSnapshot(1, "a", 5, 1, b"five"), 0.1)
    node.ready()
    node.advance(0.1)
    late = Append(1, "a", 3, 1, tuple(Entry(1, i) for i in range(4, 8)), 7)  # 4, 5: compacted
    node.handle("a", late, 0.2)
    ready = node.ready()
    assert [e.index for e in ready.entries] == [6, 7] and [e.index for e in ready.committed] == [6, 7]
    assert ready.messages == [("a", AppendReply(1, "b", True, 7))]


def test_a_restart_from_a_snapshot_starts_after_it() -> None:
    snapshot = Snapshot(3, 1, b"three")
    entries = [Entry(1, 4, b"four"), Entry(1, 5, b"five")]
    node = Node(Config("a", ("a",), E, H), 0.0, lambda: 0.0, HardState(1, "a"), entries, snapshot=snapshot)
    assert node.applied == 3 and node.log.first_index == 4 and node.snapshot == snapshot
    node.tick(2 * E)
    node.ready()
    node.advance(2 * E)
    assert [e.data for e in node.ready().committed] == [b"four", b"five", b""]
    with pytest.raises(ValueError, match=r"entry 5 \(term 1\) does not follow entry 3"):
        Node(Config("a", ("a",), E, H), 0.0, lambda: 0.0, HardState(1), entries[1:], snapshot=snapshot)


def test_a_leader_restarted_from_a_snapshot_sends_it_to_a_member_that_lost_its_log() -> None:
    site = Cluster()
    site.elect("a")
    site.propose("a", b"x")
    site.deliver_all()
    site.heartbeat()
    site.compact("a")
    site.start("a")  # from its snapshot
    site.disks["c"].__init__()  # type: ignore[misc]  # c's disk replaced by an empty one
    site.start("c")
    site.elect("a")
    assert site.installed["c"] == [Snapshot(2, 1, b"state@2")]
    site.heartbeat()
    assert site.nodes["c"].commit == site.nodes["a"].commit == 3
