"""Where ``wfm`` commands keep what outlives a run on the user's machine."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["state_home"]


def state_home() -> Path:
    """``$XDG_STATE_HOME/wfm`` (``~/.local/state/wfm`` by default, or when the variable is not an
    absolute path, as the XDG base directory specification says)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    return (Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state") / "wfm"
