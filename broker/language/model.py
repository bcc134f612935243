"""The immutable model of messages: Publication, Predicate, Filter and the Composite tree.

Every object validates itself on construction and has a canonical ``str()``: two texts with the
same meaning give equal objects and the same canonical text, and parsing that text gives an equal
object back. The parser only adds positions to the errors raised here.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Final, TypeVar, Union, overload

from broker.language.operators import (
    ALL_OPERATORS,
    NUMERIC_OPERATORS,
    PRESENT,
    STRING_OPERATORS,
    TIME_ATTRIBUTE,
    TIME_OPERATORS,
    VARIABLE_OPERATORS,
)
from broker.language.regex import REGEX, check_pattern
from broker.language.values import (
    MAX_EXACT,
    Number,
    TimeRef,
    Value,
    Var,
    check_name,
    check_string,
    format_number,
    format_string,
    is_number,
    normalize_number,
)
from broker.records import Frozen

__all__ = [
    "MAX_DEPTH",
    "And",
    "Atom",
    "Composite",
    "Filter",
    "Or",
    "Policy",
    "Predicate",
    "Publication",
    "Sequence",
    "Times",
    "combine",
    "composite_variables",
    "format_value",
    "normalize_value",
    "predicate_value",
]

CLASS = "class"
# Levels a composite may nest (an atom is one level). Printing, placing and encoding a composite walk
# it recursively, so a limit far below Python's recursion limit keeps hostile input from crashing
# them; real conditions nest a few levels. The parser and the wire codec check it before they recurse.
MAX_DEPTH = 32


def normalize_value(value: object) -> Value:
    # the common cases first: publications carry many of these. Each compares its own type (type
    # ... is, which narrows): compiled, an int compared as ``int | float`` is compared as a float
    if type(value) is int:
        if -MAX_EXACT <= value <= MAX_EXACT:
            return value
    elif type(value) is str:
        if "\n" not in value and "\r" not in value and not ("'" in value and '"' in value):
            return value
    elif type(value) is float and -MAX_EXACT <= value <= MAX_EXACT and not value.is_integer():
        return value  # finite (NaN fails the comparison), in range, not integral: kept as it is
    if isinstance(value, str):
        return check_string(value)
    return normalize_number(value)


_GOOD_NAMES: set[str] = set()  # attribute names a publication may have, checked: publications repeat them


def _attribute_name(value: object) -> None:
    """Refuse a name that is not an attribute name of a publication; remember a good one."""
    name = check_name(value, "attribute name")
    if name == CLASS:
        raise ValueError("'class' must be the first attribute and appear once")
    if name == TIME_ATTRIBUTE:
        raise ValueError("'time' is reserved for the broker's timestamp of a publication")
    if len(_GOOD_NAMES) < 100_000:
        _GOOD_NAMES.add(name)


def format_value(value: Value | Var | TimeRef) -> str:
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, Var | TimeRef):
        return str(value)
    return format_number(value)


# True only while mypyc compiles this module (setup.py gives mypy --always-true COMPILING; the
# project's mypy settings --always-false): compiled, a Publication inherits no Python class, as
# mypyc makes a native class of nothing else (one that inherits Mapping it makes a Python class,
# whose slots mypyc 2.4 lays out wrongly: the cycle collector crashes on them). It is registered
# as a Mapping instead, and writes out what Mapping would mix in; to type checkers and in the
# pure build it is a Mapping by inheritance, with the same methods.
COMPILING: Final = not __file__.endswith(".py")  # so also at run time: this module is compiled
if COMPILING:  # noqa: SIM108 (a statement: mypy skips the branch --always-false makes unreachable)
    _Base = object
else:
    _Base = Mapping[str, Value]
_T = TypeVar("_T")


class Publication(_Base):
    """An event: a class and attribute values. ``p["class"] == p.cls``; iteration starts at class."""

    __slots__ = ("_attrs", "_hash", "cls")

    cls: str
    _attrs: dict[str, Value]
    _hash: int | None

    def __init__(self, cls: str, attributes: Mapping[str, Value] | Iterable[tuple[str, Value]] = ()):
        kind = type(attributes)  # a list or a dict: no ABC check (slow) for those
        mapping = kind is dict or (kind is not list and isinstance(attributes, Mapping))
        # Any: the codec passes [name, value] lists, which compiled code would refuse as tuples
        items: Iterable[Any] = attributes.items() if mapping else attributes  # type: ignore[union-attr]
        attrs: dict[str, Value] = {}
        for name, value in items:  # the hot path of every broker and client: one set lookup a name
            if name not in _GOOD_NAMES:
                _attribute_name(name)
            if name in attrs:
                raise ValueError(f"attribute '{name}' appears more than once")
            attrs[name] = normalize_value(value)
        object.__setattr__(self, "cls", check_string(_class_name(cls)))
        names = sorted(attrs)
        if names != list(attrs):  # what comes off the wire is sorted already: no copy then
            attrs = {name: attrs[name] for name in names}
        object.__setattr__(self, "_attrs", attrs)
        object.__setattr__(self, "_hash", None)

    def __reduce__(self) -> tuple[type[Publication], tuple[str, dict[str, Value]]]:
        """Pickled (a broker's snapshot) as its class and attributes: the cached hash stays
        behind, for string hashes differ from one process to the next."""
        return Publication, (self.cls, self._attrs)

    def __getitem__(self, name: str) -> Value:
        if name == CLASS:
            return self.cls
        return self._attrs[name]

    def __iter__(self) -> Iterator[str]:
        yield CLASS
        yield from self._attrs

    def __len__(self) -> int:
        return len(self._attrs) + 1

    def __contains__(self, name: object) -> bool:
        return name == CLASS or name in self._attrs

    @overload
    def get(self, name: str, /) -> Value | None: ...
    @overload
    def get(self, name: str, /, default: Value | _T) -> Value | _T: ...
    def get(self, name: str, /, default: object = None) -> object:
        if name == CLASS:
            return self.cls
        return self._attrs.get(name, default)

    def keys(self) -> KeysView[str]:
        return KeysView(self)

    def items(self) -> ItemsView[str, Value]:
        return ItemsView(self)

    def values(self) -> ValuesView[Value]:
        return ValuesView(self)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Publication is immutable")

    @property
    def fields(self) -> Mapping[str, Value]:
        """The attributes other than class, read-only and sorted by name (the matcher's view)."""
        return MappingProxyType(self._attrs)

    def weight(self) -> int:
        """What it costs, roughly, without writing it out: custody bounds what it holds by this
        and a cumulative firing what it gathers, and it runs for every message sent."""
        size = 64
        for name, value in self._attrs.items():  # a loop, not sum() of a generator: faster
            size += len(name) + (len(value) if isinstance(value, str) else 8)
        return size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Publication):
            return NotImplemented
        return self.cls == other.cls and self._attrs == other._attrs

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Publication):
            return NotImplemented
        return not (self.cls == other.cls and self._attrs == other._attrs)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.cls, tuple(self._attrs.items()))))
        assert self._hash is not None
        return self._hash

    def __str__(self) -> str:
        pairs = [f"[{CLASS},{format_string(self.cls)}]"]
        pairs += [f"[{name},{format_value(value)}]" for name, value in self._attrs.items()]
        return ",".join(pairs)

    def __repr__(self) -> str:
        return f"Publication({str(self)!r})"


Mapping.register(Publication)  # what the compiled Publication is, not by inheritance (above)


def _class_name(cls: object) -> str:
    if not isinstance(cls, str):
        raise ValueError(f"class must be a string, not {cls!r}")
    return cls


def predicate_value(attribute: object, op: object, value: object) -> Value | Var | TimeRef:
    """The value of a predicate ``[attribute,op,value]``, canonical, or ValueError saying why
    there is no such predicate. A Predicate runs it on its fields; the wire codec runs it first
    on what it received, of any type, as a compiled Predicate refuses a field of another type
    than declared (a TypeError) before it could say what is wrong."""
    check_name(attribute, "attribute name")
    if op not in ALL_OPERATORS:
        raise ValueError(f"unknown operator '{op}'")
    if attribute == TIME_ATTRIBUTE:
        if op not in TIME_OPERATORS or not isinstance(value, TimeRef):
            raise ValueError(
                "'time' takes < <= > >= with now, now-2h, now+30m or a quoted ISO-8601 timestamp"
            )
        return value
    if isinstance(value, TimeRef):
        raise ValueError(f"a time value is only allowed for 'time', not '{attribute}'")
    if isinstance(value, Var):
        wanted = VARIABLE_OPERATORS[value.kind]
        if op != wanted:
            raise ValueError(f"variable {value} needs the operator '{wanted}', not '{op}'")
        return value
    if op == PRESENT:
        # Only the type of the value matters; a fixed representative keeps the text canonical.
        if not isinstance(value, str):
            normalize_number(value)
        return "" if isinstance(value, str) else 0
    if op in STRING_OPERATORS and not isinstance(value, str):
        raise ValueError(f"string operator '{op}' needs a string value, not the number {value}")
    if op in NUMERIC_OPERATORS and not is_number(value):
        raise ValueError(f"numeric operator '{op}' needs a number, not the string '{value}'")
    if op == REGEX:
        check_pattern(value)  # type: ignore[arg-type]
    return normalize_value(value)


@dataclass(frozen=True, slots=True)
class Predicate(Frozen):
    """``[attribute,op,value]``: the pairing of operator and value is checked here."""

    attribute: str
    op: str
    value: Value | Var | TimeRef

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", predicate_value(self.attribute, self.op, self.value))

    def __str__(self) -> str:
        return f"[{self.attribute},{self.op},{format_value(self.value)}]"


@dataclass(frozen=True, slots=True)
class Filter(Frozen):
    """A subscription or advertisement: ``[class,eq,C]`` and at most one predicate per attribute.

    Predicates are kept sorted by attribute, which is their canonical order.
    """

    cls: str
    predicates: tuple[Predicate, ...] = ()
    _by_attribute: dict[str, Predicate] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        check_string(_class_name(self.cls))
        by_attribute: dict[str, Predicate] = {}
        for predicate in self.predicates:
            if not isinstance(predicate, Predicate):
                raise ValueError(f"{predicate!r} is not a Predicate")
            if predicate.attribute == CLASS:
                raise ValueError("'class' must be the first attribute and appear once")
            if predicate.attribute in by_attribute:
                raise ValueError(f"attribute '{predicate.attribute}' appears more than once")
            by_attribute[predicate.attribute] = predicate
        object.__setattr__(self, "predicates", tuple(by_attribute[a] for a in sorted(by_attribute)))
        object.__setattr__(self, "_by_attribute", by_attribute)

    def __getitem__(self, attribute: str) -> Predicate:
        return self._by_attribute[attribute]

    def __contains__(self, attribute: object) -> bool:
        return attribute in self._by_attribute

    @property
    def variables(self) -> dict[str, Var]:
        """The variables this filter uses, by name."""
        return {p.value.name: p.value for p in self.predicates if isinstance(p.value, Var)}

    def __str__(self) -> str:
        return ",".join([f"[{CLASS},eq,{format_string(self.cls)}]", *map(str, self.predicates)])


Composite = Union["Atom", "And", "Or", "Sequence", "Times"]


@dataclass(frozen=True, slots=True)
class Atom(Frozen):
    """One filter inside a composite subscription."""

    filter: Filter
    depth: int = field(init=False, repr=False, compare=False, hash=False, default=1)

    def atoms(self) -> Iterator[Atom]:
        yield self

    def __str__(self) -> str:
        return "{" + str(self.filter) + "}"


def combine(symbol: str, operands: Iterable[Composite]) -> Composite:
    """``&``, ``||`` or ``;`` over operands; ``{A}&{A}`` is just ``{A}`` (both are idempotent)."""
    kinds: dict[str, type[And] | type[Or] | type[Sequence]] = {"&": And, "||": Or, ";": Sequence}
    kind = kinds[symbol]
    nodes = tuple(operands)
    if kind is not Sequence and len({str(o) for o in _flatten(kind, nodes)}) == 1:
        return nodes[0]
    return kind(nodes)


def _flatten(kind: type, operands: Iterable[Composite]) -> list[Composite]:
    flat: list[Composite] = []
    for operand in operands:
        if not isinstance(operand, Atom | And | Or | Sequence | Times):
            raise ValueError(f"{operand!r} is not a composite node")
        same_kind = isinstance(operand, kind) and isinstance(operand, And | Or | Sequence)
        flat.extend(operand.operands if same_kind else [operand])  # type: ignore[union-attr]
    return flat


def _depth(operands: Iterable[Composite]) -> int:
    """The depth of a node over ``operands`` (each already checked on its construction)."""
    depth = 1 + max((operand.depth for operand in operands), default=0)
    if depth > MAX_DEPTH:
        raise ValueError(f"a composite may nest at most {MAX_DEPTH} levels")
    return depth


@dataclass(frozen=True, slots=True)
class _Commutative(Frozen):
    """``&`` and ``||``: associative, commutative and idempotent, so operands are flattened,
    de-duplicated and sorted by canonical text."""

    operands: tuple[Composite, ...]
    depth: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    @property
    def symbol(self) -> str:  # a property, not a class attribute: mypyc's classes fix those
        return ""

    def __post_init__(self) -> None:
        flat = _flatten(type(self), self.operands)
        object.__setattr__(self, "depth", _depth(flat))  # before str() recurses into the operands
        unique = {str(o): o for o in flat}
        if len(unique) < 2:
            raise ValueError(f"'{self.symbol}' needs at least two different operands")
        object.__setattr__(self, "operands", tuple(unique[k] for k in sorted(unique)))

    def atoms(self) -> Iterator[Atom]:
        for operand in self.operands:
            yield from operand.atoms()

    def __str__(self) -> str:
        return "{" + self.symbol.join(map(str, self.operands)) + "}"


class And(_Commutative):
    @property
    def symbol(self) -> str:
        return "&"


class Or(_Commutative):
    @property
    def symbol(self) -> str:
        return "||"


@dataclass(frozen=True, slots=True)
class Sequence(Frozen):
    """``{S1};{S2}``: fires when a publication matching S2 arrives after one matching S1."""

    operands: tuple[Composite, ...]
    depth: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    def __post_init__(self) -> None:
        flat = _flatten(Sequence, self.operands)
        if len(flat) < 2:
            raise ValueError("';' needs at least two operands")
        object.__setattr__(self, "operands", tuple(flat))
        object.__setattr__(self, "depth", _depth(flat))

    def atoms(self) -> Iterator[Atom]:
        for operand in self.operands:
            yield from operand.atoms()

    def __str__(self) -> str:
        return "{" + ";".join(map(str, self.operands)) + "}"


@dataclass(frozen=True, slots=True)
class Times(Frozen):
    """``Times({S},N,ATTR,STEP)``: N publications matching S whose ATTR changes by STEP each time."""

    operand: Composite
    count: int
    attribute: str
    step: Number
    depth: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    def __post_init__(self) -> None:
        if not isinstance(self.operand, Atom | And | Or | Sequence | Times):
            raise ValueError(f"{self.operand!r} is not a composite node")
        object.__setattr__(self, "depth", _depth([self.operand]))
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ValueError(f"Times needs a count of at least 1, not {self.count!r}")
        check_name(self.attribute, "attribute name")
        object.__setattr__(self, "step", normalize_number(self.step))

    def atoms(self) -> Iterator[Atom]:
        yield from self.operand.atoms()

    def __str__(self) -> str:
        step = format_number(self.step)
        return f"Times({self.operand},{self.count},{self.attribute},{step})"


def composite_variables(composite: Composite) -> dict[str, Var]:
    """The variables of a composite by name; ValueError if one name is used with two kinds."""
    seen: dict[str, Var] = {}
    for atom in composite.atoms():
        for name, var in atom.filter.variables.items():
            if seen.setdefault(name, var) != var:
                raise ValueError(f"variable {var} is also used as {seen[name]}")
    return seen


class Policy(Enum):
    """Which waiting matches a completed ``&`` or ``;`` uses and consumes: Snoop's parameter
    contexts (Chakravarthy et al., 1994) and PADRES's own. A subscription's choice, kept with it
    wherever its parts are detected; docs/composites.md says what each keeps.

    * ``chronicle``: the oldest agreeing match of each operand; all of them are consumed, so each
      publication completes at most one firing (the default: a workflow fires once per job and
      generation, and state is freed as it fires);
    * ``recent``: the newest agreeing match of each operand; nothing is consumed, a new match
      replaces the waiting one of its operand with the same bindings;
    * ``continuous``: every combination of agreeing waiting matches fires; all are consumed;
    * ``cumulative``: one firing with all the agreeing waiting matches; all are consumed;
    * ``unrestricted`` (also ``padres``): every new combination fires and nothing is consumed,
      as PADRES's Rete network does (TestComplexCS)."""

    CHRONICLE = "chronicle"
    RECENT = "recent"
    CONTINUOUS = "continuous"
    CUMULATIVE = "cumulative"
    UNRESTRICTED = "unrestricted"

    @classmethod
    def named(cls, name: str) -> Policy:
        """The policy of a name (case-insensitive); ValueError naming the choices otherwise."""
        key = name.lower() if isinstance(name, str) else name
        try:
            return cls.UNRESTRICTED if key == "padres" else cls(key)
        except ValueError:
            choices = ", ".join(policy.value for policy in cls)
            raise ValueError(f"unknown consumption policy {name!r} (one of {choices}, padres)") from None

    def __str__(self) -> str:
        return self.value
