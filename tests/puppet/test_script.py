"""PuppetMaster scripts: every command, its canonical text, and one-line errors naming the line."""

from __future__ import annotations

import pytest

from wfm.puppet import ScriptError, check_script, parse_script
from wfm.puppet.script import Publish, Signal, Status, Subscribe, Wait, check_command, load_script, parse_line
from wfm.topology import parse_topology

TOPOLOGY = parse_topology(
    "Site s0 Parent none\n"
    "Process b0 Is broker On s0 URL tcp://127.0.0.1:0/broker\n"
    "Process p0 Is publisher On s0 URL tcp://127.0.0.1:0/pub\n"
    "Process s0sub Is subscriber On s0 URL tcp://127.0.0.1:0/sub\n"
)

PARSED = [
    ("Subscriber sub0 Subscribe /edu/ulisboa/*", Subscribe("sub0", "/edu/ulisboa/*", True, 1)),
    ("Subscriber sub0 Unsubscribe /a", Subscribe("sub0", "/a", False, 1)),
    ("Publisher p0 Publish 5 Ontopic /a/b Interval 100", Publish("p0", 5, "/a/b", 100, 1)),
    ("Publisher p0 Publish 5 Ontopic /a/b Interval 100 ms", Publish("p0", 5, "/a/b", 100, 1)),
    ("publisher p0 publish 5 ontopic /a/b interval 0", Publish("p0", 5, "/a/b", 0, 1)),
    ("Status", Status(1)),
    ("Crash broker0", Signal("Crash", "broker0", 1)),
    ("freeze broker0", Signal("Freeze", "broker0", 1)),
    ("Unfreeze broker0", Signal("Unfreeze", "broker0", 1)),
    ("Restart sub0", Signal("Restart", "sub0", 1)),
    ("Wait 100", Wait(100, 1)),
    ("Wait 100 ms  # a comment", Wait(100, 1)),
]


@pytest.mark.parametrize(("text", "command"), PARSED)
def test_each_command(text: str, command: object) -> None:
    assert parse_script(text) == [command]


def test_canonical_text_parses_back() -> None:
    for _, command in PARSED:
        assert parse_script(str(command)) == [command]
    assert str(parse_script("publisher p0 publish 5 ontopic /a interval 3 ms")[0]) == (
        "Publisher p0 Publish 5 Ontopic /a Interval 3"
    )


def test_lines_are_counted_past_blanks_and_comments() -> None:
    commands = parse_script("# setup\n\nFreeze b0\n   \nWait 10\n")
    assert [c.line for c in commands] == [3, 5]


BAD = [
    ("Crash", "expected: Crash NAME"),
    ("Explode b0", "unknown command 'Explode'"),
    ("Wait soon", "bad milliseconds 'soon'"),
    ("Wait -5", "bad milliseconds '-5'"),
    ("Wait 99999999999", "bad milliseconds"),
    ("Status now", "expected: Status"),
    ("Subscriber s Subscribe", "expected: Subscriber NAME"),
    ("Subscriber s Follow /a", "unknown command 'Follow'"),
    ("Subscriber s Subscribe /a/*/b", "'*' may only end"),
    ("Subscriber s Subscribe /it's", "no quotes or spaces"),
    ("Publisher p Publish 0 Ontopic /a Interval 5", "bad number of events '0'"),
    ("Publisher p Publish 3 Ontopic /a/* Interval 5", "'*' may only end a subscription's topic"),
    (
        "Publisher p Publish 3 About /a Interval 5",
        "expected: Publisher NAME Publish N Ontopic TOPIC Interval MS",
    ),
    ("Publisher p Publish 3 Ontopic /a Interval", "expected: Publisher"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_lines_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script(f"Wait 1\n{text}\n", "chaos.txt")
    assert str(caught.value).startswith("chaos.txt:2: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_check_against_the_topology() -> None:
    check_script(
        parse_script("Subscriber s0sub Subscribe /a\nPublisher p0 Publish 1 Ontopic /a Interval 0"), TOPOLOGY
    )
    for text, message in [
        ("Wait 1\nCrash nobody", "s.txt:2: no process 'nobody'"),
        ("Subscriber p0 Subscribe /a", "s.txt:1: p0 is a publisher, not a subscriber"),
        ("Publisher b0 Publish 1 Ontopic /a Interval 0", "s.txt:1: b0 is a broker, not a publisher"),
    ]:
        with pytest.raises(ScriptError, match=message):
            check_script(parse_script(text), TOPOLOGY, "s.txt")


def test_unreadable_script(tmp_path: object) -> None:
    with pytest.raises(ScriptError, match=r"cannot read script .*missing\.txt"):
        load_script(f"{tmp_path}/missing.txt")


def test_one_line_at_a_time() -> None:
    """The console's way in: the same words and errors as a file, one line at a time."""
    assert parse_line("  # only a comment", 3) is None
    assert parse_line("", 4) is None
    assert parse_line("Wait 5 ms", 7, "<stdin>") == Wait(5, 7)
    with pytest.raises(ScriptError, match=r"^<stdin>:8: expected: Status$"):
        parse_line("Status please", 8, "<stdin>")
    check_command(Wait(5, 7), TOPOLOGY, "<stdin>")
    with pytest.raises(ScriptError, match=r"^<stdin>:2: no process 'ghost'"):
        check_command(Signal("Freeze", "ghost", 2), TOPOLOGY, "<stdin>")
