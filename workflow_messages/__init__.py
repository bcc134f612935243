"""The wire vocabulary of workflows: what agents, the deployer, the trigger issuers and the monitor
publish and subscribe to, and the rules they must agree on.

It sits between the overlay (:mod:`broker`) and its two users, :mod:`agents` and :mod:`wfm`, so an
agent can speak it without loading the workflow layer (XML, Spark, the command line), and a change
of a message shape is made in one place. Everything here is pure; it imports only
:mod:`broker.language` (and, for signatures, ``cryptography`` and ``msgpack``).

- :mod:`~workflow_messages.names`: message classes, virtual jobs, statuses, what each ``on`` accepts
- :mod:`~workflow_messages.trigger`, :mod:`~workflow_messages.jobstatus`,
  :mod:`~workflow_messages.agent_ctl`: the filters, composites and publications of each message
- :mod:`~workflow_messages.signature`: the deployer's signature over an AGENT_CTL envelope (imported
  by itself, not re-exported here: only the deployer and agents need ``cryptography`` loaded)
- :mod:`~workflow_messages.params`: run parameters, declared, carried by a Trigger, seen by a job
- :mod:`~workflow_messages.calendars`: on which dates a job runs or a workflow is triggered
- :mod:`~workflow_messages.generation`: when a generation is over (the coordinator's APPL_END),
  over the dependency graphs of :mod:`~workflow_messages.graph`
"""

from workflow_messages.agent_ctl import (
    ack,
    ack_advertisement,
    ack_subscription,
    control_subscription,
    deployer_advertisement,
    digest,
    envelope_digest,
    retire_content,
    undeploy_order,
    withdraw_content,
)
from workflow_messages.calendars import DAILY, DAYS, WORDS, Calendar, parse_weekdays, weekday_words
from workflow_messages.generation import Graph, decide_end, end_of, outcome, skipped_jobs
from workflow_messages.graph import find_cycles, topological_order
from workflow_messages.jobstatus import (
    JobStatus,
    blocked,
    end_condition,
    ended,
    failures,
    generation_end,
    job_condition,
    job_status,
    monitor_subscriptions,
    parse_job_status,
    start_subscription,
    status_advertisement,
)
from workflow_messages.names import (
    ACCEPTS,
    AGENT_ACK,
    AGENT_CTL,
    APPL_END,
    APPL_START,
    CANCELLED,
    EXPIRED,
    FAILURE,
    GID,
    JOBSTATUS,
    NORUN,
    SUCCESS,
    TRIGGER,
    check_name,
)
from workflow_messages.params import (
    PARAMS,
    Param,
    decode_params,
    encode_params,
    param_environment,
    resolve,
    trigger_params,
)
from workflow_messages.trigger import (
    check_gid,
    expired,
    trigger,
    trigger_advertisement,
    trigger_atom,
    trigger_date,
    trigger_expiry,
)

__all__ = [
    "ACCEPTS",
    "AGENT_ACK",
    "AGENT_CTL",
    "APPL_END",
    "APPL_START",
    "CANCELLED",
    "DAILY",
    "DAYS",
    "EXPIRED",
    "FAILURE",
    "GID",
    "JOBSTATUS",
    "NORUN",
    "PARAMS",
    "SUCCESS",
    "TRIGGER",
    "WORDS",
    "Calendar",
    "Graph",
    "JobStatus",
    "Param",
    "ack",
    "ack_advertisement",
    "ack_subscription",
    "blocked",
    "check_gid",
    "check_name",
    "control_subscription",
    "decide_end",
    "decode_params",
    "deployer_advertisement",
    "digest",
    "encode_params",
    "end_condition",
    "end_of",
    "ended",
    "envelope_digest",
    "expired",
    "failures",
    "find_cycles",
    "generation_end",
    "job_condition",
    "job_status",
    "monitor_subscriptions",
    "outcome",
    "param_environment",
    "parse_job_status",
    "parse_weekdays",
    "resolve",
    "retire_content",
    "skipped_jobs",
    "start_subscription",
    "status_advertisement",
    "topological_order",
    "trigger",
    "trigger_advertisement",
    "trigger_atom",
    "trigger_date",
    "trigger_expiry",
    "trigger_params",
    "undeploy_order",
    "weekday_words",
    "withdraw_content",
]
