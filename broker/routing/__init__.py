"""Content-based routing as a pure state machine (no I/O): the Router.

Its messages are the wire vocabulary one floor down, :mod:`broker.messages`.
"""

from broker.routing.forwarding import COVERING_MODES
from broker.routing.router import Output, Router

__all__ = ["COVERING_MODES", "Output", "Router"]
