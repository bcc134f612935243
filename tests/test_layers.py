"""The top-level packages form layers: each imports only the ones below it, so none is part of a cycle.

    broker  <-  workflow_messages  <-  agents  <-  wfm

Read from the source with ``ast`` (every ``import``, including those inside functions and under
``TYPE_CHECKING``), not from ``sys.modules``: a lazy import is still an arrow between packages.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
LAYERS = ("broker", "workflow_messages", "agents", "wfm")  # lowest first


def imported_modules(package: str) -> Iterator[tuple[str, str]]:
    """``(file, module)`` for every absolute import in ``package``'s source files."""
    for file in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{file}: relative import"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                yield str(file.relative_to(ROOT)), name


def arrows() -> dict[str, dict[str, str]]:
    """package -> {imported top-level package: the first file that imports it}, among LAYERS."""
    found: dict[str, dict[str, str]] = {package: {} for package in LAYERS}
    for package in LAYERS:
        for file, module in imported_modules(package):
            top = module.split(".")[0]
            if top in LAYERS and top != package:
                found[package].setdefault(top, file)
    return found


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Every cycle reachable by depth-first search, as a closed path of packages."""
    found: list[list[str]] = []

    def visit(path: list[str]) -> None:
        for target in graph[path[-1]]:
            if target in path:
                found.append([*path[path.index(target) :], target])
            else:
                visit([*path, target])

    for package in graph:
        visit([package])
    return found


def test_no_cycle_between_top_level_packages() -> None:
    assert cycles(arrows()) == []


@pytest.mark.parametrize("package", LAYERS)
def test_each_package_imports_only_the_layers_below_it(package: str) -> None:
    below = LAYERS[: LAYERS.index(package)]
    upward = {target: file for target, file in arrows()[package].items() if target not in below}
    assert upward == {}, f"{package} may import only {below or 'none of the others'}"


# What else the two lower workflow packages may import besides the standard library: the wire
# vocabulary needs only the message language and a message's quality of service (an alert's), and
# msgpack and cryptography to sign envelopes; an agent adds the broker client.
ALLOWED = {
    "workflow_messages": (
        "broker.language",
        "broker.messages.qos",
        "workflow_messages",
        "msgpack",
        "cryptography",
    ),
    "agents": ("broker", "workflow_messages", "agents", "msgpack", "cryptography"),
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_the_workflow_vocabulary_and_the_agents_import_no_heavy_libraries(package: str) -> None:
    def allowed(module: str) -> bool:
        return module.split(".")[0] in sys.stdlib_module_names or any(
            module == prefix or module.startswith(prefix + ".") for prefix in ALLOWED[package]
        )

    assert [(file, module) for file, module in imported_modules(package) if not allowed(module)] == []


def test_a_client_process_loads_neither_the_router_nor_the_matcher_nor_spark() -> None:
    """The wire vocabulary is a floor of its own (``broker.messages``) and ``wfm.history`` imports
    nothing itself: a publisher, an agent or ``wfm deploy`` must not pay for a router (NumPy) or a
    store (PySpark) it never builds."""
    probe = (
        "import sys, broker.client, agents.service, wfm.deploy, wfm.monitor.service; "
        "print(sorted(m for m in sys.modules if m in ('numpy', 'pyspark') or m.startswith('broker.routing')))"
    )
    command = [sys.executable, "-c", probe]
    loaded = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("floor", ["broker/messages", "broker/client"])
def test_the_wire_vocabulary_and_the_client_import_no_router_module(floor: str) -> None:
    assert [(f, m) for f, m in imported_modules(floor) if m.startswith("broker.routing")] == []
