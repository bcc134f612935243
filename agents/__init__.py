"""Agents: receive AGENT_CTL envelopes, run jobs, publish JOBSTATUS.

:class:`agents.state.Agent` decides (no I/O); :class:`agents.service.AgentService` connects it to a
broker, the journal (:mod:`agents.journal`) and job processes (:mod:`agents.runner`); ``wfm agent``
runs one. Agents speak the vocabulary of :mod:`workflow_messages` and never import :mod:`wfm`.
"""
