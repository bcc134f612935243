"""``wfm history``, ``wfm compact`` and ``wfm report`` as processes: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker.language import parse_publication
from tests.processes import WFM
from wfm.cli import main
from wfm.history.landing import Landing

T0 = 1_780_000_000.0
JOBS = [
    parse_publication(
        f"[class,JOBSTATUS],[applname,PAYROLL],[jobname,Job{n % 2}],[GID,g{n}],"
        f"[status,{'FAILURE' if n == 3 else 'SUCCESS'}],[duration,{n + 1}]"
    )
    for n in range(6)
]


def wfm(*argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([WFM, *argv], capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    with Landing(tmp_path / "landing") as landing:
        for n, publication in enumerate(JOBS):
            landing.append(publication, T0 + 3600 * n, "agentA", f"id{n}")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["history", "[class,eq,J],[status,OK]", "--store", "."], "invalid filter: expected ',' after 'OK'"),
        (["history", "[class,eq,J]", "--store", "/nonexistent/store"], "no history store at /nonexistent"),
        (["history", "[class,eq,J]"], "give --broker URI or --store DIR"),
        (["history", "[class,eq,J]", "--broker", "socket://127.0.0.1:1/b"], "cannot connect to socket://"),
        (["history", "[class,eq,J]", "--broker", "b1"], "is not a broker URI"),
        (["history", "[class,eq,J]", "--store", ".", "--since", "yesterday"], "'yesterday' is not a time"),
        (["report", "--store", "/nonexistent/store"], "no history store"),
        (["compact"], "give --store DIR"),
        (
            [
                "history",
                "{[class,eq,J],[g,eq,$S$X]}&{[class,eq,K],[g,eq,$S$X]}",
                "--broker",
                "socket://127.0.0.1:1/b",
                "--until",
                "now+1h",
            ],
            "a composite historic query covers the past only",
        ),
        (
            ["history", "[class,eq,J]", "--store", "nowhere", "--since", "now-99999999999d"],
            "Invalid value for '--since': a relative time must be whole seconds within 365000d of now",
        ),
        (
            ["history", "[class,eq,J],[time,>,now-99999999999d]", "--broker", "socket://127.0.0.1:1/b"],
            "invalid filter: a relative time must be whole seconds within 365000d of now at column 22",
        ),
        (
            ["history", "{[class,eq,J]}||{[class,eq,K]}", "--broker", "socket://127.0.0.1:1/b"],
            "invalid composite: a historic composite query is an & of atoms",
        ),
        (
            [
                "history",
                "{[class,eq,J],[g,eq,$S$X]}&{[class,eq,K],[g,eq,$S$X]}",
                "--broker",
                "socket://127.0.0.1:1/b",
            ],
            "cannot connect to socket://127.0.0.1:1/b",
        ),
    ],
)
def test_errors_are_one_line(argv: list[str], fragment: str) -> None:
    done = wfm(*argv)
    assert done.returncode != 0 and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("wfm: error: ")]
    assert len(errors) == 1 and fragment in errors[0], done.stderr


def test_history_json_in_time_order(store_dir: Path) -> None:
    since = "2026-05-28T22:00:00"  # T0 is 20:26:40: publications 2.. only
    done = wfm(
        "history",
        "[class,eq,JOBSTATUS],[jobname,str-prefix,Job]",
        "--store",
        str(store_dir),
        "--since",
        since,
        "--spark-master",
        "local[1]",
        "-o",
        "json",
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["attributes"]["GID"] for line in lines] == ["g2", "g3", "g4", "g5"]
    assert lines[0] == {
        "subscription": "history",
        "publication": str(JOBS[2]),
        "attributes": dict(JOBS[2]),
        "time": T0 + 7200,
    }


def test_compact_and_report_in_process(
    store_dir: Path, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same commands through ``main`` reuse the tests' SparkSession: no start-up per command."""
    assert main(["compact", "--store", str(store_dir)]) == 0
    assert "compacted 1 segment" in capsys.readouterr().err
    page = store_dir / "report.html"
    assert (
        main(
            [
                "report",
                "PAYROLL",
                "--store",
                str(store_dir),
                "--by",
                "week",
                "--html",
                str(page),
                "-o",
                "json",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["job"], r["runs"], r["failures"], r["mean_duration"]) for r in rows] == [
        ("Job0", 3, 0, 3.0),
        ("Job1", 3, 1, 4.0),
    ]
    assert "<svg" in page.read_text()
    assert main(["report", "--store", str(store_dir)]) == 0
    table = capsys.readouterr().out
    assert "Job1" in table and "PAYROLL" in table


def test_composite_history_joins_on_variables(
    store_dir: Path, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    with Landing(store_dir / "landing") as landing:
        for n in (3, 1):
            landing.append(
                parse_publication(f"[class,Trigger],[applname,PAYROLL],[GID,g{n}]"), T0 + n, "t", f"t{n}"
            )
    joined = "{[class,eq,Trigger],[GID,eq,$S$X]}&{[class,eq,JOBSTATUS],[GID,eq,$S$X],[jobname,eq,Job1]}"
    assert main(["history", joined, "--store", str(store_dir), "-o", "json"]) == 0
    groups = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [[p["attributes"]["GID"] for p in g["publications"]] for g in groups] == [
        ["g1", "g1"],
        ["g3", "g3"],
    ]
    # a group lists its publications in the composite's canonical atom order, as notifications do
    assert groups[1]["publications"][0] == {
        "publication": str(JOBS[3]),
        "attributes": dict(JOBS[3]),
        "time": T0 + 3 * 3600,
    }
    assert main(["history", "{[class,eq,Trigger]}||{[class,eq,JOBSTATUS]}", "--store", str(store_dir)]) == 1
    assert "invalid composite: a historic composite query is an & of atoms" in capsys.readouterr().err


def test_store_and_broker_together_are_a_usage_error(tmp_path: Path) -> None:
    argv = ["history", "[class,eq,JOBSTATUS]", "--store", str(tmp_path), "--broker", "socket://127.0.0.1:1/b"]
    done = wfm(*argv)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "wfm: error: give --broker URI or --store DIR, not both\n"
    env = {**os.environ, "WFM_BROKER": "socket://127.0.0.1:1/b"}  # exported for wfm up: --store wins
    done = subprocess.run([WFM, *argv[:4]], capture_output=True, text=True, timeout=180, env=env)
    assert done.stderr == f"wfm: error: no history store at {tmp_path} (no landing/ or table/ inside)\n"
