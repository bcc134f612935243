"""The one error of the workflow layer: a definition with problems, each at a line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from broker.errors import LocalError
from workflow_messages import check_name

__all__ = ["DefinitionError", "Problem", "declared", "first_on"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a definition, at a line of its file (None: built in code)."""

    line: int | None
    message: str

    def __str__(self) -> str:
        return self.message if self.line is None else f"line {self.line}: {self.message}"


def declared(named: Iterable[tuple[str, int | None]], what: str) -> Iterator[Problem]:
    """The problems of declarations (``what``: calendar, pool) given as (name, line): a name that
    is not one, a name declared twice."""
    first: dict[str, int | None] = {}
    for name, line in named:
        try:
            check_name(name, f"{what} name")
        except ValueError as error:
            yield Problem(line, str(error))
        if name in first:
            yield Problem(line, f"duplicate {what} {name!r}{first_on(first[name])}")
        first.setdefault(name, line)


def first_on(line: int | None) -> str:
    """What a problem with a name given twice adds about the first: `` (first on line N)``, or
    nothing for a definition built in code."""
    return f" (first on line {line})" if line else ""


class DefinitionError(LocalError, ValueError):
    """A workflow definition is invalid; ``problems`` lists all of them, ordered by line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda problem: problem.line or 0))
        super().__init__("; ".join(map(str, self.problems)))
