"""Matching publications against many filters: the counting ``Matcher`` and the literal oracle."""

from broker.matching.matcher import CountingMatcher, Matcher
from broker.matching.oracle import LinearMatcher, matches

__all__ = ["CountingMatcher", "LinearMatcher", "Matcher", "matches"]
