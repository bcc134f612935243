"""The example of docs/puppet.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.puppet.test_chaos import Run

DOC = Path(__file__).parents[2] / "docs" / "puppet.md"


def block(marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"no {marker} block in {DOC}"
    return found.group(1)


@pytest.mark.chaos
def test_the_documented_example_runs(tmp_path: Path) -> None:
    run = Run(tmp_path, block("puppet-script"), block("puppet-topology"))
    assert run.returncode == 0, run.stderr
    assert run.pairs()["publisher0", "subscriber0"]["received"] == 10
