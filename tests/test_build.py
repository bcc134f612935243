"""The build of the compiled group (``broker.compiled``) a run loads, and that both builds agree.

``make test`` says which build it installed (``WFM_EXPECT_BUILD``): the suite must run on it,
never on a stale or partial one; ``WFM_PURE=1`` must load the Python even beside compiled files.
A broker's log written by one build is read by the other (``broker.records``). A machine without
a C compiler gets the pure package.
"""

from __future__ import annotations

import importlib
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from broker import compiled
from broker.language import parse_composite, parse_filter, parse_publication
from broker.messages import Carry, CompositeSubscribe, Deliver, Publish, Subscribe
from broker.messages.qos import Qos
from broker.routing.router import Router


def _import_group() -> dict[str, str]:
    for module in compiled.MODULES:
        importlib.import_module(module)
    return compiled.loaded()


def test_the_group_is_loaded_whole_and_as_make_test_installed_it() -> None:
    builds = _import_group()
    assert set(builds.values()) == {compiled.BUILD}, builds  # never part compiled
    # WFM_PURE=1 at run time wins over what was installed (WFM_PURE=1 make test on a compiled install)
    expected = "pure" if compiled.pure_requested() else os.environ.get("WFM_EXPECT_BUILD")
    if expected:
        assert expected == compiled.BUILD, (
            f"the {expected} build was installed but this run loads the {compiled.BUILD} one"
            " (stale: the sources changed since the build? make install builds it again)"
        )


def test_wfm_pure_loads_the_python_beside_compiled_files() -> None:
    code = (
        "import broker.compiled as c, broker.routing.router; print(sorted(set(c.loaded().values())), c.BUILD)"
    )
    env = {**os.environ, compiled.ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['pure']", "pure"]


def _records() -> list[object]:
    publication = parse_publication("[class,stock],[price,100],[symbol,IBM]")
    qos = Qos(priority=7, ttl=60.0)
    router = Router("B1", covering="lazy")
    router.handle(
        Subscribe("s1", parse_filter("[class,eq,stock],[price,>,10],[symbol,str-prefix,I]")), "B2", 0.0
    )
    return [
        Carry(3, Publish("B1/c/1", publication, 5, True, 12.5, qos)),
        Deliver(("s1", "s2"), publication, "B1/c/1", 12.5),
        CompositeSubscribe("c1", parse_composite("{[class,eq,a],[n,=,$I$N]};{[class,eq,b],[n,=,$I$N]}")),
        router.snapshot(),
    ]


@pytest.mark.skipif(compiled.BUILD != "compiled", reason="only one build is installed")
def test_a_pickle_of_either_build_is_read_by_the_other() -> None:
    """Compiled here, pure in a process of its own: each unpickles the other's records and
    pickles them again; what comes back here is equal to what left."""
    records = _records()
    code = (
        "import pickle, sys, broker.compiled as c; assert c.BUILD == 'pure';"
        " sys.stdout.buffer.write(pickle.dumps(pickle.loads(sys.stdin.buffer.read())))"
    )
    env = {**os.environ, compiled.ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, input=pickle.dumps(records), capture_output=True, check=True
    )
    back = pickle.loads(out.stdout)
    assert back[:3] == records[:3]
    assert Router.restore(back[3]).snapshot().keys() == records[3].keys()


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_a_machine_without_a_c_compiler_builds_the_pure_package(tmp_path: Path) -> None:
    """``pip wheel`` of the project's files (a copy: the build removes compiled files it cannot
    make from the tree it runs in) with no compiler to be found: a pure wheel, every module as
    Python."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    source = tmp_path / "source"
    for name in tracked.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV} | {"CC": "/nonexistent/cc"}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path / "out"), str(source)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    said = built.stderr + built.stdout
    assert "installing the pure Python: no C compiler (/nonexistent/cc not found)" in said
    [wheel] = (tmp_path / "out").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith((".so", ".pyd"))] == []
    assert {compiled.source_path(m, Path()).as_posix() for m in compiled.MODULES} <= set(names)
