"""Matching publications against many filters: the counting matcher and the literal oracle.

``CountingMatcher`` takes the time as an argument; ``Matcher`` is the same with the one-argument
``match(p)`` promised to outside users (docs/matching.md), which reads the system clock.
"""

from broker.matching.clocked import Matcher
from broker.matching.matcher import CountingMatcher
from broker.matching.oracle import LinearMatcher, matches

__all__ = ["CountingMatcher", "LinearMatcher", "Matcher", "matches"]
