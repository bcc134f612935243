"""Names a package imports only when first used (PEP 562).

A package whose ``__init__`` imports every name it offers makes each process pay for the heaviest
of them: ``broker.routing``'s router brings NumPy (its matcher) to every client, and
``wfm.history``'s store brings PySpark to ``wfm deploy``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The package's module ``__getattr__``: each name in ``homes`` from its submodule (``homes``
    maps a name to the submodule that defines it), imported on first use, then kept in the
    package like an eagerly imported name."""

    def load(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return load
