"""Agent daemons: receive AGENT_CTL, run jobs, publish JOBSTATUS (arrives with the workflow layer)."""
