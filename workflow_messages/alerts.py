"""ALERT: what an agent publishes, beside the job's FAILURE status, when a job fails.

An alert is retained (an operator who connects an hour later still gets it), persistent, urgent
(priority 8) and asks for the operator's acknowledgement (``ack=client``); anyone may cancel it
(``cancel=any``), which is what acknowledging it with ``wfm alerts ack`` does, so it disappears
for every operator at once. Its id (``Qos.mid``) names the run: ``WORKFLOW.JOB.GID``.
"""

from __future__ import annotations

from broker.language import Filter, Publication
from broker.messages.qos import Qos
from workflow_messages._build import filter_of
from workflow_messages.names import APPL_END, APPL_START, FAILURE, JOBSTATUS

__all__ = ["ALERT", "ALERT_FIELDS", "alert_advertisement", "alert_id", "job_alert"]

ALERT = "ALERT"
ALERT_FIELDS = ("applname", "jobname", "GID", "status", "detail")
ALERT_PRIORITY = 8


def alert_advertisement(agent: str) -> Filter:
    """What an agent advertises before it publishes alerts."""
    return filter_of(ALERT, {"agentname": agent}, present=ALERT_FIELDS)


def alert_id(workflow: str, job: str, gid: str) -> str:
    """The alert's own id: ``WORKFLOW.JOB.GID``, cut to what a message id may hold."""
    return "".join(f"{workflow}.{job}.{gid}".split())[:128]


def job_alert(status: Publication) -> tuple[Publication, Qos] | None:
    """The alert a JOBSTATUS calls for (a job's FAILURE in a generation not cancelled; not the
    generation's own APPL_START or APPL_END, which a job's failure fails), and the quality of
    service it goes with; None for any other publication."""
    if status.cls != JOBSTATUS or status.get("status") != FAILURE or status.get("cancelled"):
        return None
    if status.get("jobname") in (APPL_START, APPL_END):
        return None
    fields = {name: status[name] for name in (*ALERT_FIELDS, "agentname") if name in status}
    mid = alert_id(str(fields["applname"]), str(fields["jobname"]), str(fields["GID"]))
    qos = Qos(priority=ALERT_PRIORITY, retain=True, ack="client", mid=mid, cancel="any")
    return Publication(ALERT, fields), qos
