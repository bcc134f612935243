"""An agent process loads neither lxml nor Spark, nor the workflow XML loader: it never uses them.

Checked in a fresh interpreter, since this test process has long imported everything: import the
agent package and its service, then run ``wfm agent --help`` through the ``wfm`` entry point (which
loads the command exactly as ``wfm agent`` does), and list what landed in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("lxml", "pyspark", "wfm.workflow")

PROGRAM = f"""
import json, sys
import agents, agents.service
from wfm.cli import main
status = main(["agent", "--help"])
heavy = [m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in {HEAVY!r})]
print(json.dumps([status, sorted(heavy)]))
"""


def test_an_agent_process_imports_no_lxml_nor_spark() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    status, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert "--name" in done.stdout  # the agent command's help: the command was loaded
    assert (status, heavy) == (0, [])
