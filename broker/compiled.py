"""Which modules ``setup.py`` compiles with mypyc, and which build of them this process runs.

The broker's hot path (a publication's decoding, model, routing, custody, matching and encoding)
is compiled together, one mypyc group (``GROUP``): compiled modules call each other's functions
and classes directly, so the group is loaded whole or not at all. Its typed Python stays the
source, and beside each compiled module its ``.py`` stays installed: the pure build. The process
runs the pure build when

* ``WFM_PURE=1`` is set (``setup.py`` also reads it: nothing is compiled then), or
* no compiled build is there (no C compiler or no mypyc when it was installed), or
* the compiled build is stale: its sources changed after it was built (an editable install's
  ``.so`` files sit next to the ``.py`` they were made of, and would shadow an edit). The build
  writes a digest of its sources (``DIGEST``) that must equal the sources' digest now.

Imported first by ``broker/__init__.py``, which calls ``choose()``: when the pure build is chosen
while compiled files are there, a finder loads the group's ``.py`` files in their place. Never
compiled itself. ``BUILD`` says what was chosen, ``loaded()`` what each module is.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["BUILD", "ENV", "GROUP", "MODULES", "choose", "loaded", "source_digest"]

ENV = "WFM_PURE"
GROUP = "broker._hot"  # the shared library is broker/_hot__mypyc.<suffix>
DIGEST = "_hot.digest"  # beside this file: the digest of the sources the build was made of
MODULES = (
    "broker.records",
    "broker.language.values",
    "broker.language.model",
    "broker.messages.ids",
    "broker.transport.codec",
    "broker.matching.bounds",
    "broker.matching.attribute_index",
    "broker.matching.matcher",
    "broker.routing.snapshots",
    "broker.routing.backlog",
    "broker.routing.tables",
    "broker.routing.custody",
    "broker.routing.publishers",
    "broker.routing.router",
)

_ROOT = Path(__file__).resolve().parent.parent
BUILD = "pure"  # or "compiled": set by choose()


def pure_requested(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return environ.get(ENV, "") not in ("", "0")


def source_path(module: str, root: Path = _ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(root: Path = _ROOT, modules: Sequence[str] = MODULES) -> str:
    """The digest of the group's sources, in order (about 0.2 ms)."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.encode() + b"\0" + source_path(module, root).read_bytes() + b"\0")
    return digest.hexdigest()


def _extension(module: str) -> Path | None:
    base = source_path(module).with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (candidate := base.with_name(base.name + suffix)).exists():
            return candidate
    return None


def _current() -> bool:
    """Whether a complete compiled build of the current sources is there."""
    if any(_extension(module) is None for module in (*MODULES, GROUP + "__mypyc")):
        return False
    try:
        built = (Path(__file__).with_name(DIGEST)).read_text().strip()
        return built == source_digest()
    except OSError:
        return False


class _PureFinder:
    """Finds the ``.py`` of each module of the group, before the compiled file beside it."""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in MODULES:
            return None
        return importlib.util.spec_from_file_location(name, source_path(name))


def choose() -> str:
    """Decide, once, which build this process runs (see the module's docstring)."""
    global BUILD
    if BUILD == "compiled" or any(finder is _PureFinder for finder in sys.meta_path):
        return BUILD
    if not pure_requested() and _current():
        BUILD = "compiled"
    elif any(_extension(module) is not None for module in MODULES):
        sys.meta_path.insert(0, _PureFinder)  # type: ignore[arg-type]
    return BUILD


def loaded() -> dict[str, str]:
    """Each module of the group imported so far: "compiled" or "pure"."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return {
        name: "compiled" if str(getattr(sys.modules[name], "__file__", "")).endswith(suffixes) else "pure"
        for name in MODULES
        if name in sys.modules
    }
