"""Approval steps: a job with no command that a person approves (SUCCESS) or rejects (FAILURE)
with ``wfm approve``. Its definition names the roles that may (``<approval roles="operator"/>``),
read here from the XML attribute and from the JOBINFO or DEPLOY that carries it, by the same rule,
so that neither ``wfm validate`` nor an agent takes what the other would refuse."""

from __future__ import annotations

from workflow_messages._build import text_value

__all__ = [
    "APPROVAL_ROLES",
    "APPROVAL_RULE",
    "DEFAULT_ROLES",
    "MAX_COMMENT",
    "approval_roles",
    "parse_approval",
    "verdict_detail",
]

# the roles an approval may name: those who may sign an operation (agents.trust.OPERATOR_ROLES)
APPROVAL_ROLES = ("operator", "deployer")
MAX_COMMENT = 500  # characters of an approval's comment: it goes into the step's status detail
DEFAULT_ROLES = ",".join(APPROVAL_ROLES)  # an <approval> without roles: whoever may operate
APPROVAL_RULE = f"approval roles are a comma list of the roles that may approve: {', '.join(APPROVAL_ROLES)}"


def approval_roles(text: str) -> tuple[str, ...]:
    """The roles of an ``<approval roles="operator,deployer"/>``, sorted; ValueError otherwise."""
    return parse_approval([word.strip() for word in text.split(",")])


def parse_approval(value: object) -> tuple[str, ...]:
    """The roles of a job definition's ``approval`` list (empty: not an approval step), sorted and
    without repeats; ValueError (one line) if it is not a list of :data:`APPROVAL_ROLES`."""
    if not isinstance(value, list) or not all(isinstance(role, str) for role in value):
        raise ValueError(f"{APPROVAL_RULE}, not {value!r}")
    unknown = [role for role in value if role not in APPROVAL_ROLES]
    if unknown:
        raise ValueError(f"{APPROVAL_RULE}, not {', '.join(map(repr, unknown))}")
    return tuple(sorted(set(value)))


def verdict_detail(approved: bool, signer: str, comment: str) -> str:
    """The detail of an approval step's status: who decided, and why if they said; as the status
    carries it (on one line, cut to its length), so that an approval sent again finds it equal."""
    said = f": {comment}" if comment else ""
    return text_value(f"{'approved' if approved else 'rejected'} by {signer}{said}")
