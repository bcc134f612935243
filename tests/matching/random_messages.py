"""Random filters and publications over a small shared vocabulary, so that matches are common.

Values are drawn from a few overlapping pools (ints, decimals, integral decimals, strings with odd
characters, prefixes of each other) so that every operator meets equal, smaller, larger, prefix
and wrong-type values; attributes are often missing from publications and often extra.
"""

from __future__ import annotations

import random

from broker.language import Filter, Predicate, Publication, TimeRef, Var
from broker.language.operators import NUMERIC_OPERATORS, PRESENT, STRING_OPERATORS
from broker.language.regex import REGEX

CLASSES = ["stock", "bond"]
ATTRIBUTES = ["a", "b", "c", "d", "e"]
NUMBERS = [-3, -1, 0, 1, 2, 2.5, 3, 7, 100, 100.5, -0.25, 0.1, 1e-3, 2**53]
# str-regex patterns that meet the strings above: anchors, classes, alternatives, case, code points
PATTERNS = ["^a", "b$", "^$", "", "a|I", "(?i)ibm", "[éü]", "^.{2}$", "^[^a]", "\\t", "'", "^(ab)+c?$"]
STRINGS = ["", "a", "ab", "abc", "b", "IBM", "IB", "I", "x y", "é", "ü-ö", "a\tb", "'q'", '"', "zz"]


def random_value(rng: random.Random) -> int | float | str:
    return rng.choice(NUMBERS) if rng.random() < 0.5 else rng.choice(STRINGS)


def random_predicate(rng: random.Random, attribute: str, variables: bool) -> Predicate:
    roll = rng.random()
    if variables and roll < 0.1:
        kind = rng.choice("SIF")
        return Predicate(attribute, "eq" if kind == "S" else "=", Var(kind, "X"))
    if roll < 0.15:
        return Predicate(attribute, PRESENT, rng.choice([0, "s"]))
    if roll < 0.55:
        return Predicate(attribute, rng.choice(list(NUMERIC_OPERATORS)), rng.choice(NUMBERS))
    op = rng.choice(list(STRING_OPERATORS))
    pool = PATTERNS + STRINGS if op == REGEX else STRINGS
    return Predicate(attribute, op, rng.choice(pool))


def random_filter(rng: random.Random, variables: bool = False, timed: bool = False) -> Filter:
    attributes = rng.sample(ATTRIBUTES, rng.randint(0, 4))
    predicates = [random_predicate(rng, a, variables) for a in attributes]
    if timed and rng.random() < 0.3:
        offset = rng.choice([-3600, 0, 3600])
        predicates.append(Predicate("time", rng.choice(["<", "<=", ">", ">="]), TimeRef(offset=offset)))
    return Filter(rng.choice(CLASSES), tuple(predicates))


def random_publication(rng: random.Random) -> Publication:
    attributes = rng.sample([*ATTRIBUTES, "extra"], rng.randint(0, 6))
    return Publication(rng.choice(CLASSES), {a: random_value(rng) for a in attributes})
