"""Agent daemons: receive AGENT_CTL envelopes, run jobs, publish JOBSTATUS.

:mod:`agents.state` decides (no I/O), :mod:`agents.daemon` connects it to a broker, the journal
(:mod:`agents.journal`) and job processes (:mod:`agents.runner`); ``wfm agent`` runs one.
"""
