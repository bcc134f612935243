"""Fixtures the agents' test modules share."""

from tests.agents.test_processes import overlay

__all__ = ["overlay"]  # three brokers in a line and an agent on each, as real processes
