"""Content-based routing as a pure state machine (no I/O): ``router.Router`` and its tables.

Its messages are the wire vocabulary one floor down, :mod:`broker.messages`. The package itself
imports nothing, so a process that needs one light module of it (the covering modes a command
line offers) does not load the matcher's NumPy.
"""
