"""``wfm puppet``: SESDAD's PuppetMaster for our overlay. A script of faults and traffic
(:mod:`.script`) is run against the processes of a topology (:mod:`wfm.topology`) by
``Puppet`` (:mod:`.runner`), whose publishers and subscribers are small processes
(:mod:`.worker`); :func:`check` (:mod:`.checker`) then reports what was lost, duplicated or
delivered out of the order the topology promises. See docs/puppet.md.

The package exports only the pure parts: a worker process imports :mod:`.topics` through it and
must not load the runner (which imports ``wfm.up`` and, through it, lxml)."""

from wfm.puppet.checker import CHECKS, Cycle, PairReport, Published, Received, Report, Window, check
from wfm.puppet.script import Command, ScriptError, check_script, load_script, parse_script

__all__ = [
    "CHECKS",
    "Command",
    "Cycle",
    "PairReport",
    "Published",
    "Received",
    "Report",
    "ScriptError",
    "Window",
    "check",
    "check_script",
    "load_script",
    "parse_script",
]
