"""Journal compaction: bounded over many generations, and a crash at any step of it loses nothing;
the journal of the versions before is converted on the first start."""

from __future__ import annotations

import fcntl
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agents.events import Delivered, Event, Finished, Incoming, Result, TimePassed
from agents.journal import Journal
from agents.journal_records import fields
from agents.state import Agent
from broker.durable import log as wal_module
from broker.durable.log import WriteAheadLog
from broker.errors import LocalError
from broker.language import Publication
from tests.agents.test_state import PLAN, key, runs, status, trigger
from tests.signing import signed


class Crash(Exception):
    """The process stops here."""


def on_disk(state_dir: Path) -> tuple[bytes | None, list[dict[str, Any]]]:
    """The journal in ``state_dir`` as a restart would find it: its snapshot and the records
    after it (read from a copy: the journal may still be open)."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "journal"
        shutil.copytree(state_dir / "journal", copy)
        wal = WriteAheadLog(copy)
        try:
            snapshot, records = wal.recover()
        finally:
            wal.close()
    return snapshot, [json.loads(record) for record in records]


def records(state_dir: Path) -> list[dict[str, Any]]:
    """The journal's records after its snapshot, on disk."""
    return on_disk(state_dir)[1]


def journaled(agent: Agent, journal: Journal, event: Event, now: float) -> list[Any]:
    """What :class:`agents.service.AgentService` does with one event."""
    effects = agent.handle(event, now)
    journal.write(event, now)
    journal.sync()
    if journal.due():
        journal.compact(agent.snapshot())
    return effects


def generation(agent: Agent, journal: Journal, gid: str, now: float) -> None:
    """JobB of ``gid`` fires, runs, succeeds, JobC is not run, and the generation ends here."""
    [run] = runs(
        journaled(agent, journal, Delivered(key(agent, "JobB"), (trigger(gid), status("JobA", gid))), now)
    )
    journaled(agent, journal, Finished(run, Result(True, "exit 0", now, 0.1)), now)
    # JobC is not scheduled on the trigger's Monday: its NORUN ends the generation for agentB
    journaled(agent, journal, Delivered(key(agent, "JobC"), (trigger(gid), status("JobA", gid))), now)


def installed(journal: Journal) -> Agent:
    agent = Agent("agentB")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentB":
            journaled(agent, journal, Incoming(publication), 0.0)
    return agent


def recovered(directory: Path, **limits: int) -> tuple[Agent, int]:
    agent = Agent("agentB")
    journal = Journal(directory, **limits)
    replayed = journal.recover(agent)
    journal.close()
    return agent, replayed


def test_the_journal_stays_bounded_and_a_restart_replays_only_the_tail(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "a", max_records=50)
    agent = installed(journal)
    lines = []
    for n in range(300):
        generation(agent, journal, f"g{n:04}", float(n))
        lines.append(len(records(tmp_path / "a")))
    journal.close()
    assert max(lines) < 50 and min(lines) < 3  # compacted again and again
    snapshot, _ = on_disk(tmp_path / "a")
    assert snapshot is not None and len(snapshot) < 100_000
    tmp_path /= "a"
    restarted, replayed = recovered(tmp_path, max_records=50)
    assert replayed < 50
    assert restarted.snapshot() == agent.snapshot()
    assert (
        restarted.handle(Delivered(key(restarted, "JobB"), (trigger("g0299"), status("JobA", "g0299"))), 1.0)
        == []
    )


def crash_writing(path: Path, data: bytes, **options: Any) -> None:
    """A crash while the snapshot's temporary file is half written: it is never renamed."""
    path.with_name(f".{path.name}.0.tmp").write_bytes(data[: len(data) // 2])
    raise Crash


def crash_after_rename(path: Path, data: bytes, **options: Any) -> None:
    """A crash after the new snapshot replaced the old one, before the new log was made."""
    WRITE(path, data, **options)
    raise Crash


WRITE = wal_module.replace_atomically


@pytest.mark.parametrize(
    ("write", "replays"), [(crash_writing, 10), (crash_after_rename, 0)], ids=["writing", "renamed"]
)
def test_a_crash_during_compaction_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Any, replays: int
) -> None:
    journal = Journal(tmp_path, max_records=1000)
    agent = installed(journal)
    for n in range(3):
        generation(agent, journal, f"old{n}", float(n))
    journal.compact(agent.snapshot())  # a snapshot already there, and a tail after it
    for n in range(3):
        generation(agent, journal, f"g{n}", float(n))
    [running] = runs(
        journaled(agent, journal, Delivered(key(agent, "JobB"), (trigger("r"), status("JobA", "r"))), 9.0)
    )
    monkeypatch.setattr(wal_module, "replace_atomically", write)
    with pytest.raises(Crash):
        journal.compact(agent.snapshot())
    journal.close()
    monkeypatch.undo()
    restarted = Agent("agentB")
    journal = Journal(tmp_path)
    assert journal.recover(restarted) == replays  # the tail after the snapshot in place, no more
    assert restarted.snapshot() == agent.snapshot()
    assert list(restarted.running.values()) == [running]
    journaled(restarted, journal, Finished(running, Result(True, "exit 0", 9.0, 1.0)), 10.0)
    journal.compact(restarted.snapshot())
    journal.close()
    final, replayed = recovered(tmp_path)
    assert final.snapshot() == restarted.snapshot() and final.running == {} and replayed == 0


def test_a_crash_after_the_tail_is_emptied_loses_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = installed(journal)
    generation(agent, journal, "g1", 1.0)
    journal.compact(agent.snapshot())
    journal.close()  # no more records: as if the process stopped right after truncating
    restarted, replayed = recovered(tmp_path)
    assert replayed == 0 and restarted.snapshot() == agent.snapshot()


def test_an_agent_of_the_version_before_still_running_keeps_its_state_directory(tmp_path: Path) -> None:
    """It holds ``.lock``: a second agent there would run its jobs again."""
    with (tmp_path / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(LocalError, match=f"^{tmp_path} is in use by another agent$"):
            Journal(tmp_path)
    Journal(tmp_path).close()  # free once it is gone


def test_one_agent_per_state_directory(tmp_path: Path) -> None:
    first = Journal(tmp_path)
    with pytest.raises(LocalError, match=f"^{tmp_path} is in use by another agent$"):
        Journal(tmp_path)
    first.close()
    Journal(tmp_path).close()  # free again once the first one is gone


def test_publications_are_journaled_as_structures(tmp_path: Path) -> None:
    """A restart rebuilds publications from their journaled structure, not by parsing their text
    (which made restarts grow with the tail)."""
    journal = Journal(tmp_path)
    agent = installed(journal)
    generation(agent, journal, "g1", 1.0)
    journal.close()
    assert all(isinstance(record.get("pub", []), list) for record in records(tmp_path))
    assert all("[class," not in json.dumps(record) for record in records(tmp_path))


def old_journal(
    state_dir: Path, snapshot: tuple[int, dict[str, Any]] | None, tail: list[dict[str, Any]]
) -> None:
    """The files the journal of the version before left: ``snapshot.json`` (the sequence number
    of the last record it includes, the state), ``journal.jsonl`` (a record a line) and its lock."""
    if snapshot is not None:
        (state_dir / "snapshot.json").write_text(json.dumps({"sequence": snapshot[0], "state": snapshot[1]}))
    (state_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tail))
    (state_dir / ".lock").touch()


def test_the_journal_of_the_version_before_is_converted_on_the_first_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its snapshot and the records after it replay (records it already included are skipped,
    records with publication texts, from the version before it, still read, a torn last line cut,
    a record whose publication is not one skipped with a warning); then it is a snapshot of the
    new journal, and its files are gone."""
    events: list[tuple[Event, float]] = []
    agent = Agent("agentB")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentB":
            agent.handle(Incoming(publication), 0.0)
            events.append((Incoming(publication), 0.0))
    included = agent.snapshot()
    [run] = runs(agent.handle(Delivered(key(agent, "JobB"), (trigger("g1"), status("JobA", "g1"))), 1.0))
    tail: list[tuple[Event, float]] = [
        (Delivered(key(agent, "JobB"), (trigger("g1"), status("JobA", "g1"))), 1.0)
    ]
    for event, now in [
        (Finished(run, Result(True, "exit 0", 1.0, 0.1)), 2.0),
        (Delivered(key(agent, "JobC"), (trigger("g1"), status("JobA", "g1"))), 3.0),
    ]:
        agent.handle(event, now)
        tail.append((event, now))
    old = [{"n": n, "t": now, **fields(event)} for n, (event, now) in enumerate([*events, *tail], 1)]
    for record in old[len(events) :]:  # as the version before that wrote them
        if "pub" in record:
            record["publication"] = str(Publication(*record.pop("pub")))
        if "pubs" in record:
            record["publications"] = [str(Publication(*p)) for p in record.pop("pubs")]
    bad = {"n": len(old) + 1, "t": 4.0, "event": "incoming", "pub": ["AGENT_CTL", ["not", "a dict"]]}
    old_journal(tmp_path, (len(events), included), [*old, bad])
    with (tmp_path / "journal.jsonl").open("a") as torn:
        torn.write('{"n": 99, "t": 4.0, "event": "deliv')
    restarted, replayed = recovered(tmp_path)
    assert replayed == len(tail) and restarted.snapshot() == agent.snapshot()
    assert f"journal.jsonl:{len(old) + 1}: skipped a bad record: not a publication" in caplog.text
    assert f"journal.jsonl:{len(old) + 2}: cut off a torn record" in caplog.text
    assert not any((tmp_path / name).exists() for name in ("snapshot.json", "journal.jsonl", ".lock"))
    again, replayed = recovered(tmp_path)
    assert replayed == 0 and again.snapshot() == agent.snapshot()


def test_an_old_journal_left_beside_a_converted_one_is_deleted_unread(tmp_path: Path) -> None:
    """A crash after the conversion's checkpoint and before the old files went: the new journal
    holds their state already."""
    journal = Journal(tmp_path)
    agent = installed(journal)
    journal.compact(agent.snapshot())
    journal.close()
    old_journal(tmp_path, None, [{"n": 1, "t": 0.0, "event": "tick"}])
    restarted, replayed = recovered(tmp_path)
    assert replayed == 0 and restarted.snapshot() == agent.snapshot()
    assert not (tmp_path / "journal.jsonl").exists()


BEFORE = Path(__file__).parent / "journal_before"  # written by the journal of the version before


def test_a_journal_written_by_the_version_before_is_read_and_converted(tmp_path: Path) -> None:
    """``journal_before/``: ``snapshot.json`` and ``journal.jsonl`` as that version left them
    (agentB installed, five generations, compacted every 12 records), and the agent's state
    they held (``state_after.json``)."""
    for name in ("snapshot.json", "journal.jsonl"):
        shutil.copy(BEFORE / name, tmp_path / name)
    agent, replayed = recovered(tmp_path)
    expected = json.loads((BEFORE / "state_after.json").read_text())
    assert replayed == 4 and json.loads(json.dumps(agent.snapshot())) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]
    again, replayed = recovered(tmp_path)
    assert replayed == 0 and json.loads(json.dumps(again.snapshot())) == expected


def test_a_record_that_is_not_an_event_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path)
    journal.write(TimePassed(), 1.0)
    journal.wal.append(b'{"t": 2.0, "event": "incoming", "pub": ["AGENT_CTL", ["not", "a dict"]]}')
    journal.write(TimePassed(), 3.0)
    journal.sync()
    journal.close()
    assert recovered(tmp_path)[1] == 2
    assert "record 2 after the snapshot: skipped a bad record: not a publication" in caplog.text
