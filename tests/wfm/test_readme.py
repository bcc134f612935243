"""The README's examples run as written (against brokers of the test's own, on free ports)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.processes import WFM, brokers

README = Path(__file__).parents[2] / "README.md"


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)


def test_the_composite_subscription_example_fires(tmp_path: Path) -> None:
    """Its publisher published without advertising first: the broker refused both publications
    ("fits no advertisement of this client") and the composite never fired."""
    [block] = [b for b in shell_blocks() if "cs {{" in b]
    with brokers({"B1": [], "B2": ["B1"]}) as uris:
        script = (
            block.replace(".venv/bin/wfm", WFM)
            .replace("socket://127.0.0.1:7001/B1", str(uris["B1"]))
            .replace("socket://127.0.0.1:7002/B2", str(uris["B2"]))
            .replace("-o json &", f"-o json > {tmp_path / 'deliveries'} &")
        )
        done = subprocess.run(
            ["bash", "-c", f"{script}wait"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=tmp_path,
        )
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    [firing] = [json.loads(line) for line in (tmp_path / "deliveries").read_text().splitlines()]
    assert [p["publication"] for p in firing["publications"]] == ["[class,a],[x,k1]", "[class,b],[x,k1]"]


def test_the_docs_point_at_files_in_the_repository() -> None:
    """Three docs cited INTERFACE.md, which is not in the repository: each now points at the doc
    here that says the same. Every relative link of the README and docs/ names a file that exists."""
    docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
    for doc in docs:
        text = doc.read_text()
        assert "INTERFACE.md" not in text, doc
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not re.match(r"[a-z]+:", target):
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"
