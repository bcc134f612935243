"""Who may advertise, publish and subscribe what: the edge broker's access control.

A client's identity and role come from its TLS certificate (``LinkUp``); a policy gives each role
(and, if it must, one identity) three lists of filters, which may name the client's own identity
as ``$IDENTITY``:

* ``publish``: a publication must match one of them (``["*"]``: any);
* ``subscribe``: a subscription must be covered by one (every publication it can match, the rule
  allows); each atom of a composite subscription too;
* an advertisement is allowed if the role may publish something of its class;

and ``deny_publish`` / ``deny_subscribe``: filters that nothing of the role may overlap, checked
first, so that "anything but AGENT_CTL" is two lines. What no rule allows is refused, with the
rule or the role named in the reason. A client on a plain link has no role: a broker without TLS
checks nothing (a developer's loopback set-up; agents still verify what they run).

The policy is data: the workflow layer ships the default rules for its roles (the broker knows
no workflow classes), and ``wfm broker --acl FILE`` reads a TOML file of the same shape::

    [roles.agent]
    publish = ["[class,eq,JOBSTATUS],[agentname,eq,$IDENTITY]"]
    subscribe = ["[class,eq,AGENT_CTL],[agentname,eq,$IDENTITY]", "[class,eq,Trigger]"]

    [identities.alice]        # replaces alice's role's rules
    publish = ["*"]
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from broker.errors import LocalError, ParseError
from broker.language import parse_filter
from broker.language.model import Composite, Filter, Publication
from broker.language.values import format_string
from broker.matching.oracle import matches
from broker.messages import Advertise, CompositeSubscribe, Publish, Subscribe
from broker.routing.relations import predicate_overlaps, subscription_covers

__all__ = ["ANY", "Policy", "PolicyError", "Rules", "refusal"]

ANY = "*"
_LISTS = ("publish", "subscribe", "deny_publish", "deny_subscribe")


class PolicyError(LocalError):
    """An ACL that cannot be used: which file, which key, what is wrong."""


@dataclass(frozen=True)
class Rules:
    """One role's (or identity's) lists, as written: filter texts, ``$IDENTITY`` not yet filled in."""

    where: str  # for refusals: "roles.agent" or "identities.alice"
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    deny_publish: tuple[str, ...] = ()
    deny_subscribe: tuple[str, ...] = ()


class Policy:
    def __init__(self, roles: Mapping[str, Rules], identities: Mapping[str, Rules] = {}) -> None:
        self.roles = dict(roles)
        self.identities = dict(identities)
        for rules in [*self.roles.values(), *self.identities.values()]:
            for name in _LISTS:  # every filter must parse (with some identity filled in)
                _filters(getattr(rules, name), "x", f"{rules.where}.{name}")

    @classmethod
    def parse(cls, text: str, source: str = "ACL") -> Policy:
        """From TOML text; ParseError naming ``source`` and the key for anything wrong."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise PolicyError(f"{source}: {error}") from None
        unknown = set(data) - {"roles", "identities"}
        if unknown:
            raise PolicyError(f"{source}: unknown section {sorted(unknown)[0]!r} (roles, identities)")
        tables = {kind: _table(data.get(kind, {}), f"{source}: {kind}") for kind in ("roles", "identities")}
        try:
            roles, identities = (
                {name: _rules(value, f"{kind}.{name}") for name, value in tables[kind].items()}
                for kind in ("roles", "identities")
            )
            return cls(roles, identities)
        except PolicyError as error:
            raise PolicyError(f"{source}: {error}") from None

    def merged(self, other: Policy) -> Policy:
        """This policy with ``other``'s roles and identities in place of its own of the same name."""
        return Policy({**self.roles, **other.roles}, {**self.identities, **other.identities})

    def _rules(self, identity: str, role: str) -> Rules | None:
        return self.identities.get(identity) or self.roles.get(role)

    def may_publish(self, identity: str, role: str, publication: Publication, now: float) -> str | None:
        """None if allowed, else the reason."""
        rules = self._rules(identity, role)
        if rules is None:
            return f"role {role!r} of {identity} has no rules: it may not publish"
        for rule in _filters(rules.deny_publish, identity, "") or ():
            if matches(rule, publication, now):
                return f"{rules.where}.deny_publish {rule} forbids it"
        allowed = _filters(rules.publish, identity, "")
        if allowed is None or any(matches(rule, publication, now) for rule in allowed):
            return None
        return f"no rule of {rules.where}.publish allows it"

    def may_advertise(self, identity: str, role: str, advertisement: Filter) -> str | None:
        rules = self._rules(identity, role)
        if rules is None:
            return f"role {role!r} of {identity} has no rules: it may not advertise"
        for rule in _filters(rules.deny_publish, identity, "") or ():
            if _intersect(rule, advertisement):
                return f"{rules.where}.deny_publish {rule} forbids it"
        allowed = _filters(rules.publish, identity, "")
        if allowed is None or any(rule.cls == advertisement.cls for rule in allowed):
            return None
        return f"no rule of {rules.where}.publish is of class {advertisement.cls}"

    def may_subscribe(self, identity: str, role: str, composite: Composite | Filter) -> str | None:
        rules = self._rules(identity, role)
        if rules is None:
            return f"role {role!r} of {identity} has no rules: it may not subscribe"
        denied = _filters(rules.deny_subscribe, identity, "") or ()
        allowed = _filters(rules.subscribe, identity, "")
        wanted = [composite] if isinstance(composite, Filter) else [a.filter for a in composite.atoms()]
        for subscription in wanted:
            for rule in denied:
                if _intersect(subscription, rule):
                    return f"{rules.where}.deny_subscribe {rule} forbids {subscription}"
            if allowed is not None and not any(subscription_covers(rule, subscription) for rule in allowed):
                return f"no rule of {rules.where}.subscribe covers {subscription}"
        return None


def _intersect(a: Filter, b: Filter) -> bool:
    """Could a publication match both? Same class, and every attribute both constrain overlaps."""
    return a.cls == b.cls and all(
        predicate_overlaps(p, b[p.attribute]) for p in a.predicates if p.attribute in b
    )


def _table(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise PolicyError(f"{where} must be a table")
    return value


def _rules(value: object, where: str) -> Rules:
    table = _table(value, where)
    unknown = set(table) - set(_LISTS)
    if unknown:
        raise PolicyError(f"{where}: unknown key {sorted(unknown)[0]!r} ({', '.join(_LISTS)})")
    lists: dict[str, tuple[str, ...]] = {}
    for name in _LISTS:
        items = table.get(name, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise PolicyError(f"{where}.{name} must be a list of filter strings")
        if name.startswith("deny") and ANY in items:
            raise PolicyError(f"{where}.{name}: {ANY!r} is for what is allowed (leave the list out instead)")
        lists[name] = tuple(items)
    return Rules(where, **lists)


@lru_cache(maxsize=4096)
def _filters(texts: Iterable[str], identity: str, where: str) -> tuple[Filter, ...] | None:
    """The filters of one list for one identity; None for ``["*"]`` (anything)."""
    if ANY in texts:
        return None
    found = []
    for i, text in enumerate(texts):
        try:
            found.append(parse_filter(text.replace("$IDENTITY", format_string(identity))))
        except ParseError as error:
            raise PolicyError(f"{where}[{i}]: {error}") from None
    return tuple(found)


def refusal(
    policy: Policy | None,
    peer: tuple[str, str],
    message: Advertise | Subscribe | CompositeSubscribe | Publish,
    now: float,
) -> str | None:
    """Why a client's request is refused by the policy, or None. ``peer`` is the identity and
    role its certificate gave; a client on a plain link (no role) is not checked."""
    identity, role = peer
    if policy is None or not role:
        return None
    if isinstance(message, Publish):
        reason = policy.may_publish(identity, role, message.publication, now)
        verb = "publish this"
    elif isinstance(message, Advertise):
        reason = policy.may_advertise(identity, role, message.filter)
        verb = f"advertise {message.filter}"
    else:
        reason = policy.may_subscribe(
            identity, role, message.filter if isinstance(message, Subscribe) else message.composite
        )
        verb = "subscribe to this"
    return None if reason is None else f"access denied: {identity} ({role}) may not {verb}: {reason}"
