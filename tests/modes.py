"""File modes, for the tests that files at rest are their owner's only (docs/security.md)."""

from __future__ import annotations

import stat
from pathlib import Path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files(directory: Path) -> dict[str, int]:
    """The mode of every file under ``directory``, by its path there."""
    return {str(p.relative_to(directory)): mode(p) for p in sorted(directory.rglob("*")) if p.is_file()}
