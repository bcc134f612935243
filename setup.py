"""Builds wfm: the broker's hot path compiled with mypyc where it can be, the plain Python otherwise.

Everything else is declared in pyproject.toml. ``broker/compiled.py`` lists the modules compiled
(one mypyc group) and says which build a process runs. They are compiled when mypyc imports (the
build requires mypy) and a C compiler builds against Python's headers, unless ``WFM_PURE=1``; a
machine without a compiler gets the same package as plain Python. ``pip install -e .`` builds the
``.so`` files next to their ``.py`` in the source tree; ``broker/_hot.digest`` (the sources they
were made of) lets a process notice they are stale after an edit and run the ``.py`` instead.
"""

from __future__ import annotations

import os
import runpy
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from setuptools import setup

ROOT = Path(__file__).resolve().parent
BUILD: dict[str, Any] = runpy.run_path(str(ROOT / "broker" / "compiled.py"))  # no import of broker


def say(text: str) -> None:
    print(f"wfm build: {text}", file=sys.stderr, flush=True)


def cannot_compile() -> str | None:
    """Why the group cannot be compiled here, or None."""
    if BUILD["pure_requested"]():
        return f"{BUILD['ENV']} is set"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed (it comes with mypy)"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler ({' '.join(cc) or 'cc'} not found)"
    with tempfile.TemporaryDirectory(prefix="wfm-probe-") as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("#include <Python.h>\nint probe(void) { return 0; }\n")
        include = sysconfig.get_paths()["include"]
        probe = [*cc, "-c", str(source), "-o", str(Path(tmp, "probe.o")), "-I", include]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            return f"{cc[0]} cannot compile against Python's headers ({include})"
    return None


def compiled_files(keep: tuple[str, ...] = ()) -> list[Path]:
    """Compiled files in the source tree's broker package (an editable install's), but those of
    the modules ``keep``: the package has no extensions but the group's."""
    found = []
    for path in (ROOT / "broker").rglob("*"):
        if path.suffix in (".so", ".pyd"):
            module = ".".join(path.relative_to(ROOT).with_name(path.name.split(".")[0]).parts)
            if module not in keep:
                found.append(path)
    return found


# the commands that build extensions; the others (egg_info, dist_info: pip asks for metadata first,
# in a process of its own) need none, and mypyc would run for nothing
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}


def ext_modules() -> list[Any]:
    if not BUILDS.intersection(sys.argv[1:]):
        return []
    digest = ROOT / "broker" / BUILD["DIGEST"]
    reason = cannot_compile()
    if reason is not None:
        say(f"installing the pure Python: {reason}")
        digest.unlink(missing_ok=True)  # compiled files an earlier build left are not used
        for path in compiled_files():
            path.unlink()
        return []
    from mypyc.build import mypycify

    modules = BUILD["MODULES"]
    for path in compiled_files(keep=(*modules, BUILD["GROUP"] + "__mypyc")):
        path.unlink()  # of a module compiled before and no longer
    say(f"compiling {len(modules)} modules with mypyc (WFM_PURE=1 installs the pure Python)")
    paths = [str(BUILD["source_path"](module, ROOT).relative_to(ROOT)) for module in modules]
    # COMPILING: broker.language.model's Publication is a native class then
    extensions = mypycify(
        # the project's mypy settings but for COMPILING, which they make always false
        ["--config-file", "", "--ignore-missing-imports", "--always-true", "COMPILING", *paths],
        group_name=BUILD["GROUP"],
        opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"),
    )
    digest.write_text(BUILD["source_digest"](ROOT) + "\n")
    return extensions


setup(ext_modules=ext_modules())
