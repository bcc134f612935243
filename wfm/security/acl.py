"""The default access rules of a workflow overlay, and ``wfm broker --acl FILE`` on top of them.

The broker enforces rules it does not write (``broker.routing.acl``): the classes of a workflow
are this layer's. The defaults follow the roles of ``wfm certs``:

* a **deployer** (``wfm deploy``) may publish and subscribe anything;
* an **operator** (``wfm trigger``, ``cancel``, ``rerun``, ``hold``, ``release``, ``approve``,
  ``alerts ack``, the dashboard of a team that deploys elsewhere) publishes Triggers and envelopes
  (agents take only the operations, CANCEL, RERUN, HOLD, RELEASE and APPROVE, from it) and
  acknowledgements (``ACK``), asks agents and historians, and subscribes to anything;
* a **scheduler** (``wfm schedule``) publishes Triggers only, and reads the statuses that say a
  generation started;
* an **agent** may subscribe only to its own AGENT_CTL envelopes, to job statuses and triggers (its
  jobs' composite subscriptions), to queries, to the pool messages addressed to it and to the
  deadlines' alerts (a standby follows those of the jobs it may take over), and publish
  statuses, their jobs' states, acknowledgements, answers, alerts and pool messages only as itself;
* a **historian** subscribes to anything and publishes history answers only;
* a **monitor** (``wfm monitor``, ``wfm history --broker``, ``wfm workflows``, ``wfm runs``,
  ``wfm logs``) subscribes to anything, and publishes only its own history questions and queries
  to agents;
* a **client** publishes anything but the workflow's control traffic, alerts and history answers, and
  subscribes to anything but envelopes, queries and their answers, and the answers to anyone's
  history questions but its own (a log tail or a job's command may say more than a client
  should read; the operators' ``wfm`` commands and ``wfm web`` run as deployer, operator or
  monitor).

A history question says who asks (``asker``, which must be the asker's own name) and the
historian, which knows these rules too, answers only what the asker may subscribe to.

So a stolen client certificate cannot make an agent run anything (and agents check every
signature in any case), and an agent's cannot speak for another agent.
"""

from __future__ import annotations

from pathlib import Path

from broker.client.acks import ACK_CLASS as ACK
from broker.routing.acl import AccessPolicy, AccessPolicyError
from workflow_messages.alerts import ALERT
from workflow_messages.deadlines import DEADLINE
from workflow_messages.jobstate import JOBSTATE
from workflow_messages.names import (
    AGENT_ACK,
    AGENT_ANSWER,
    AGENT_CTL,
    AGENT_QUERY,
    HISTORY_QUERY,
    HISTORY_RESULT,
    JOBSTATUS,
    TRIGGER,
)
from workflow_messages.pools import POOL

__all__ = ["DEFAULT_ACL", "load_policy"]

_CONTROL = [
    *(
        f"[class,eq,{cls}]"
        for cls in (
            AGENT_CTL,
            AGENT_ACK,
            JOBSTATUS,
            TRIGGER,
            AGENT_QUERY,
            AGENT_ANSWER,
            HISTORY_RESULT,
            ALERT,
            POOL,
            JOBSTATE,
        )
    ),
    f"[class,eq,{HISTORY_QUERY}],[asker,neq,$IDENTITY]",  # a history question as anyone else
]
_ASK = f"[class,eq,{HISTORY_QUERY}],[asker,eq,$IDENTITY]"  # a history question, as oneself

DEFAULT_ACL = f"""
[roles.deployer]
publish = ["*"]
subscribe = ["*"]

[roles.operator]
publish = [
    "[class,eq,{TRIGGER}]",
    "[class,eq,{AGENT_CTL}]",
    "[class,eq,{AGENT_QUERY}]",
    "{_ASK}",
    "[class,eq,{ACK}]",
]
subscribe = ["*"]

[roles.scheduler]
publish = ["[class,eq,{TRIGGER}]"]
subscribe = ["[class,eq,{JOBSTATUS}]"]

[roles.agent]
publish = [
    "[class,eq,{JOBSTATUS}],[agentname,eq,$IDENTITY]",
    "[class,eq,{AGENT_ACK}],[agentname,eq,$IDENTITY]",
    "[class,eq,{AGENT_ANSWER}],[agentname,eq,$IDENTITY]",
    "[class,eq,{ALERT}],[agentname,eq,$IDENTITY]",
    "[class,eq,{POOL}],[agentname,eq,$IDENTITY]",
    "[class,eq,{JOBSTATE}],[agentname,eq,$IDENTITY]",
]
subscribe = [
    "[class,eq,{AGENT_CTL}],[agentname,eq,$IDENTITY]",
    "[class,eq,{POOL}],[to,eq,$IDENTITY]",
    "[class,eq,{JOBSTATUS}]",
    "[class,eq,{TRIGGER}]",
    "[class,eq,{AGENT_QUERY}]",
    "[class,eq,{ALERT}],[status,eq,{DEADLINE}]",
]

[roles.historian]
publish = ["[class,eq,{HISTORY_RESULT}]"]
subscribe = ["*"]

[roles.monitor]
publish = ["{_ASK}", "[class,eq,{AGENT_QUERY}]"]
subscribe = ["*"]

[roles.client]
publish = ["*"]
subscribe = ["*"]
deny_publish = {_CONTROL!r}
deny_subscribe = [
    "[class,eq,{AGENT_CTL}]",
    "[class,eq,{AGENT_QUERY}]",
    "[class,eq,{AGENT_ANSWER}]",
    "[class,eq,{HISTORY_QUERY}]",
    "[class,eq,{HISTORY_RESULT}],[asker,neq,$IDENTITY]",
]
""".replace("'", '"')


def load_policy(path: Path | None = None) -> AccessPolicy:
    """The default rules, with the roles and identities of the TOML file at ``path`` in place of
    theirs. AccessPolicyError naming the file for anything wrong."""
    policy = AccessPolicy.parse(DEFAULT_ACL, "the default ACL")
    if path is None:
        return policy
    try:
        text = path.read_text()
    except OSError as error:
        raise AccessPolicyError(f"cannot read ACL {path}: {error.strerror or error}") from None
    return policy.merged(AccessPolicy.parse(text, str(path)))
