"""Text to model: a lark LALR parser, a Transformer into the model, and readable errors.

Parsing and transforming are separate steps. Lark's exceptions and the model's ``ValueError``s are
converted to ``ParseError`` here, at one boundary, each naming the column and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from broker.errors import ParseError
from broker.language.model import (
    CLASS,
    MAX_DEPTH,
    Atom,
    Composite,
    Filter,
    Policy,
    Predicate,
    Publication,
    Times,
    combine,
)
from broker.language.operators import ALL_OPERATORS, TIME_ATTRIBUTE, TIME_OPERATORS
from broker.language.values import NAME_RE, TimeRef, Value, Var, normalize_number, parse_decimal

__all__ = ["parse_composite", "parse_composite_subscription", "parse_filter", "parse_publication"]

T = TypeVar("T")


@lru_cache(maxsize=1)
def parser() -> Lark:
    return Lark.open(
        "grammar.lark",
        rel_to=__file__,
        parser="lalr",
        start=["publication", "filter", "composite"],
        propagate_positions=False,  # error columns come from tokens, which always have them
        maybe_placeholders=False,
    )


def parse_publication(text: str) -> Publication:
    """``[class,stock],[price,100]`` -> Publication."""
    return _parse(text, "publication", allow_variables=False)


def parse_filter(text: str, allow_variables: bool = False) -> Filter:
    """``[class,eq,stock],[price,>,99]`` -> Filter (a subscription or an advertisement).

    Variables (``$S$X``) belong to composite subscriptions; ``allow_variables`` admits them for
    a filter that goes with one, such as the condition that clears a composite's bindings."""
    return _remembered(text, "filter", allow_variables)


def parse_composite(text: str) -> Composite:
    """``{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}`` -> composite tree."""
    return _remembered(text, "composite", True)


def parse_composite_subscription(text: str) -> tuple[Composite, Policy]:
    """``[POLICY] COMPOSITE``, as a ``cs`` line names it: ``recent {{[class,eq,a]}&{[class,eq,b]}}``.
    The policy is a word of its own before the composite (it belongs to the subscription, not to
    any node of it); without one, ``chronicle``."""
    if not isinstance(text, str):
        raise ParseError(f"expected a message text, not {type(text).__name__}", 1, "")
    word = _POLICY_WORD.match(text)
    if word is None or word.group(1) == "Times":
        return parse_composite(text), Policy.CHRONICLE
    try:
        policy = Policy.named(word.group(1))
    except ValueError as error:
        raise ParseError(str(error), word.start(1) + 1, text) from None
    try:
        return parse_composite(text[word.end() :]), policy
    except ParseError as error:  # its column in the whole line
        raise ParseError(error.reason, error.column + word.end(), text) from None


_POLICY_WORD = re.compile(r"\s*([A-Za-z_]\w*)")


def _remembered(text: str, start: str, allow_variables: bool) -> Any:
    """Filters and composites are immutable and short, and the same texts come again and again
    (every job of a workflow names the same clear filter), so their parses are cached (errors are
    not). Publications are not: each is new, and a large one would stay in memory."""
    if not isinstance(text, str):  # unhashable, perhaps: _parse says what is wrong
        return _parse(text, start, allow_variables)
    return _parse_cached(text, start, allow_variables)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, start: str, allow_variables: bool) -> Any:
    return _parse(text, start, allow_variables)


def _parse(text: str, start: str, allow_variables: bool) -> Any:
    if not isinstance(text, str):
        raise ParseError(f"expected a message text, not {type(text).__name__}", 1, "")
    try:
        tree = parser().parse(text, start=start)
    except UnexpectedInput as error:
        raise _syntax_error(text, error, start) from None
    if start == "composite":
        _check_depth(tree, text)  # before the transformer, which recurses
    try:
        return _Build(allow_variables).transform(tree)
    except VisitError as error:
        if isinstance(error.orig_exc, ParseError):
            raise ParseError(error.orig_exc.reason, error.orig_exc.column, text) from None
        raise


_LEVELS = {"atom", "group", "times"}  # each a pair of braces or a Times(...)


def _check_depth(tree: Tree[Token], text: str) -> None:
    """ParseError if the composite nests deeper than ``MAX_DEPTH``, found without recursion. The
    braces are counted as written: a level the model would flatten away counts all the same."""
    stack: list[tuple[Tree[Token], int]] = [(tree, len(tree.children) > 1)]  # {A}&{B}: one level
    while stack:
        node, depth = stack.pop()
        depth += node.data in _LEVELS
        if depth > MAX_DEPTH:
            first: Tree[Token] | Token = node
            while isinstance(first, Tree):
                first = first.children[0]
            raise ParseError(f"a composite may nest at most {MAX_DEPTH} levels", _column(first), text)
        subtrees = [(child, depth) for child in node.children if isinstance(child, Tree)]
        stack.extend(reversed(subtrees))  # the first too deep in the text is the one reported


def _at(token: Token, action: Callable[[], T]) -> T:
    """Run a model constructor, blaming ``token``'s column for any ValueError it raises."""
    try:
        return action()
    except ValueError as error:
        raise ParseError(str(error), _column(token)) from None


def _column(token: Token) -> int:
    return token.column or 1


def _value(token: Token, attribute: str) -> Value | TimeRef:
    kind = token.type
    if kind == "INT":
        return _at(token, lambda: normalize_number(int(token)))
    if kind == "DECIMAL":
        return _at(token, lambda: parse_decimal(token))
    if kind == "STRING":
        text = str(token)[1:-1]
        if attribute == TIME_ATTRIBUTE:
            return _at(token, lambda: TimeRef.parse(text))
        return text
    if attribute == TIME_ATTRIBUTE and kind == "TIMEREF":
        return _at(token, lambda: TimeRef.parse(token))
    if not NAME_RE.match(token):
        raise ParseError(f"'{token}' must be quoted to be a string value", _column(token))
    return str(token)


class _Build(Transformer[Token, Any]):
    """Parse tree -> model. Pairs travel as tokens until a whole message can be checked."""

    def __init__(self, allow_variables: bool) -> None:
        super().__init__()
        self.allow_variables = allow_variables
        self.variables: dict[str, Var] = {}

    def ppair(self, items: list[Token]) -> tuple[Token, Token]:
        return items[0], items[1]

    def publication(self, pairs: list[tuple[Token, Token]]) -> Publication:
        cls = self._class(pairs[0], None)
        values: list[tuple[str, Value]] = []
        seen: set[str] = {CLASS}
        for name, token in pairs[1:]:
            self._once(name, seen)
            if name == TIME_ATTRIBUTE:
                raise ParseError("'time' is reserved for the broker's timestamp", _column(name))
            value = _value(token, str(name))
            assert not isinstance(value, TimeRef)
            values.append((str(name), value))
        return Publication(cls, values)

    def operator(self, items: list[Token]) -> Token:
        return items[0]

    def fpair(self, items: list[Token]) -> tuple[Token, Token, Token]:
        return items[0], items[1], items[2]

    def filter(self, pairs: list[tuple[Token, Token, Token]]) -> Filter:
        name, op, value = pairs[0]
        cls = self._class((name, value), op)
        predicates: list[Predicate] = []
        seen: set[str] = {CLASS}
        for name, op, token in pairs[1:]:
            self._once(name, seen)
            predicates.append(self._predicate(name, op, token))
        return Filter(cls, tuple(predicates))

    def _predicate(self, name: Token, op: Token, token: Token) -> Predicate:
        if token.type == "VAR":
            if not self.allow_variables:
                raise ParseError(
                    f"variable {token} is allowed only in a composite subscription", _column(token)
                )
            var = _at(token, lambda: Var(token[1], token[3:]))
            known = self.variables.setdefault(var.name, var)
            if known != var:
                raise ParseError(f"variable {var} is also used as {known}", _column(token))
            value: Value | Var | TimeRef = var
        else:
            value = _value(token, str(name))
        wrong_for_time = name == TIME_ATTRIBUTE and op not in TIME_OPERATORS
        blame = op if op not in ALL_OPERATORS or wrong_for_time else token
        return _at(blame, lambda: Predicate(str(name), str(op), value))

    @staticmethod
    def _class(pair: tuple[Token, Token], op: Token | None) -> str:
        name, token = pair
        if name != CLASS:
            raise ParseError(f"the first attribute must be 'class', not '{name}'", _column(name))
        if op is not None and op != "eq":
            raise ParseError(f"'class' must be compared with 'eq', not '{op}'", _column(op))
        if token.type not in ("STRING", "NAME", "TIMEREF"):
            raise ParseError(f"the class must be a string, not {token}", _column(token))
        value = _value(token, CLASS)
        assert isinstance(value, str)
        return value

    @staticmethod
    def _once(name: Token, seen: set[str]) -> None:
        if name == CLASS:
            raise ParseError("'class' must be the first attribute and appear once", _column(name))
        if name in seen:
            raise ParseError(f"attribute '{name}' appears more than once", _column(name))
        seen.add(str(name))

    # composites

    def composite(self, items: list[Any]) -> Composite:
        return self._combine(items)

    def atom(self, items: list[Filter]) -> Atom:
        return Atom(items[0])

    def group(self, items: list[Any]) -> Composite:
        return self._combine(items)

    def times(self, items: list[Any]) -> Times:
        operand, count, attribute, step = items
        number = _value(step, "") if step.type in ("INT", "DECIMAL") else None
        return _at(count, lambda: Times(operand, int(count), str(attribute), number))  # type: ignore[arg-type]

    @staticmethod
    def _combine(items: list[Any]) -> Composite:
        if len(items) == 1:
            return items[0]  # type: ignore[no-any-return]
        combinators = items[1::2]
        symbols = {str(c) for c in combinators}
        if len(symbols) > 1:
            raise ParseError(
                f"cannot mix {' and '.join(sorted(symbols))} in one group; add braces",
                _column(combinators[1]),
            )
        symbol = symbols.pop()
        return _at(combinators[0], lambda: combine(symbol, items[0::2]))


# syntax errors -----------------------------------------------------------------------------

_VALUES = {"INT", "DECIMAL", "STRING", "NAME", "TIMEREF", "VAR"}
_LITERALS = {
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "TIMES": "'Times'",
    "COMBINATOR": "'&', '||' or ';'",
    "$END": "the end",
}
_COMPOSITE_ONLY = {"LBRACE", "RBRACE", "COMBINATOR", "RPAR", "TIMES"}
_PREVIOUS = re.compile(r"""('[^']*'|"[^"]*"|\$?[A-Za-z0-9_\-:/$.+]+|<>|<=|>=|\|\||\S)\s*\Z""")
_BAD_NUMBER = re.compile(r"[+-]?[0-9.][0-9A-Za-z_.]*")


def _expected(names: set[str]) -> str:
    if "INT" in names and "NAME" in names:
        return "a value"
    if "SYMBOL_OP" in names:
        return "an operator"
    if names == {"INT"}:
        return "a whole number"
    if {"INT", "DECIMAL"} <= names:
        return "a number"
    if "NAME" in names:
        return "an attribute name" if "LSQB" not in names else "a name"
    described = sorted({_LITERALS.get(n, n) for n in names})
    return " or ".join(described) if described else "something else"


def _syntax_error(text: str, error: UnexpectedInput, start: str) -> ParseError:
    position = getattr(error, "pos_in_stream", None)
    if position is None:
        position = len(text)
    column = position + 1
    token = getattr(error, "token", None)
    names = set(getattr(error, "expected", ()) or getattr(error, "allowed", ()) or ())
    if start != "composite":  # LALR shares states with atoms; do not suggest composite syntax
        names -= _COMPOSITE_ONLY
    expected = _expected(names)
    at_end = token is not None and token.type == "$END"
    if isinstance(error, UnexpectedEOF) or position >= len(text) or at_end:
        if not text.strip():
            return ParseError("empty message", 1, text)
        return ParseError(f"unexpected end of message, expected {expected}", len(text) + 1, text)
    if isinstance(error, UnexpectedCharacters):
        bad = _BAD_NUMBER.match(text, position)
        if bad and names & {"INT", "DECIMAL"}:
            return ParseError(
                f"'{bad.group()}' is not a number"
                " (integers have no leading zeros, decimals look like 1.5 or .5)",
                column,
                text,
            )
        found = text[position]
        if found in "'\"":
            return ParseError(f"unterminated string starting with {found}", column, text)
        wanted = f", expected {expected}" if names else ""
        return ParseError(f"unexpected character '{found}'{wanted}{_after(text, position)}", column, text)
    found = f", found {_quoted(str(token))}" if token is not None and str(token) else ""
    return ParseError(f"expected {expected}{_after(text, position)}{found}", column, text)


def _previous(text: str, position: int) -> str:
    """The last meaningful token before ``position`` (separators skipped) for "after 'price'"."""
    while True:
        match = _PREVIOUS.search(text, 0, position)
        if not match:
            return ""
        if match.group(1) not in (",", "["):
            return match.group(1)
        position = match.start()


def _quoted(token: str) -> str:
    return token if token[:1] in ("'", '"') else f"'{token}'"


def _after(text: str, position: int) -> str:
    previous = _previous(text, position)
    return f" after {_quoted(previous)}" if previous else ""
