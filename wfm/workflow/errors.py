"""The one error of the workflow layer: a definition with problems, each at a line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.errors import LocalError

__all__ = ["DefinitionError", "Problem", "first_on"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a definition, at a line of its file (None: built in code)."""

    line: int | None
    message: str

    def __str__(self) -> str:
        return self.message if self.line is None else f"line {self.line}: {self.message}"


def first_on(line: int | None) -> str:
    """What a problem with a name given twice adds about the first: `` (first on line N)``, or
    nothing for a definition built in code."""
    return f" (first on line {line})" if line else ""


class DefinitionError(LocalError, ValueError):
    """A workflow definition is invalid; ``problems`` lists all of them, ordered by line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda problem: problem.line or 0))
        super().__init__("; ".join(map(str, self.problems)))
