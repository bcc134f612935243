"""Journal compaction: bounded over many generations, and a crash at any step of it loses nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agents.journal
from agents.journal import Journal
from agents.state import Agent, Delivered, Event, Finished, Incoming, Result
from broker.errors import LocalError
from broker.language import Publication
from tests.agents.test_state import PLAN, key, runs, status, trigger
from tests.signing import signed


class Crash(Exception):
    """The process stops here."""


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
    journal = Journal(tmp_path, max_records=50)
    agent = installed(journal)
    lines = []
    for n in range(300):
        generation(agent, journal, f"g{n:04}", float(n))
        lines.append(len((tmp_path / "journal.jsonl").read_bytes().splitlines()))
    journal.close()
    assert max(lines) < 50 and min(lines) < 3  # compacted again and again
    assert (tmp_path / "snapshot.json").stat().st_size < 100_000
    restarted, replayed = recovered(tmp_path, max_records=50)
    assert replayed < 50
    assert restarted.snapshot() == agent.snapshot()
    assert (
        restarted.handle(Delivered(key(restarted, "JobB"), (trigger("g0299"), status("JobA", "g0299"))), 1.0)
        == []
    )


def crash_writing(path: Path, data: dict[str, Any]) -> None:
    """A crash while the snapshot's temporary file is half written: it is never renamed."""
    path.with_name(path.name + ".tmp").write_text('{"sequence": 1, "sta')
    raise Crash


def crash_after_rename(path: Path, data: dict[str, Any]) -> None:
    """A crash after the new snapshot replaced the old one, before the tail was emptied."""
    WRITE(path, data)
    raise Crash


WRITE = agents.journal.write_atomically


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
    monkeypatch.setattr(agents.journal, "write_atomically", write)
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


def test_one_agent_per_state_directory(tmp_path: Path) -> None:
    first = Journal(tmp_path)
    with pytest.raises(LocalError, match=f"^{tmp_path} is in use by another agent$"):
        Journal(tmp_path)
    first.close()
    Journal(tmp_path).close()  # free again once the first one is gone


def test_publications_are_journaled_as_structures_and_old_text_records_are_still_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart rebuilds publications from their journaled structure, not by parsing their text
    (which made restarts grow with the tail); a journal written with texts still replays, and a
    record whose publication is not one is skipped with a warning."""
    journal = Journal(tmp_path)
    agent = installed(journal)
    generation(agent, journal, "g1", 1.0)
    journal.close()
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert all("[class," not in line for line in lines)  # no publication text left to parse
    old = [json.loads(line) for line in lines]
    for record in old:  # the same journal as the code before wrote it
        if "pub" in record:
            record["publication"] = str(Publication(*record.pop("pub")))
        if "pubs" in record:
            record["publications"] = [str(Publication(*p)) for p in record.pop("pubs")]
    bad = {"n": len(old) + 1, "t": 2.0, "event": "incoming", "pub": ["AGENT_CTL", ["not", "a dict"]]}
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*old, bad]))
    restarted, replayed = recovered(tmp_path)
    assert replayed == len(old) and restarted.snapshot() == agent.snapshot()
    assert f"journal.jsonl:{len(old) + 1}: skipped a bad record: not a publication" in caplog.text
