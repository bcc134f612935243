"""Whom an agent takes AGENT_CTL envelopes, Triggers and job statuses from.

An envelope makes the agent run commands, so before acting on one the agent checks, in this order
(the first failure is the refusal's reason):

1. its signature (:func:`workflow_messages.signature.check_signature`): unsigned, tampered with (a
   byte changed anywhere in the signed fields) or carrying unsigned fields: refused;
2. the signer. With a CA (``--tls DIR``): the envelope's certificate was issued by it, is valid at
   the envelope's arrival and has role (OU) ``deployer``. Without: the key is the one given with
   ``--trust``, or else the first key this agent ever accepted (trust on first use: pinned, logged
   loudly, kept in the agent's snapshot so a restart does not reopen it);
3. downgrade: an envelope for another version of a workflow than the one deployed last, signed
   before that one was (a lower sequence), or signed before the workflow was undeployed (not for
   the operations, CANCEL, RERUN, HOLD, RELEASE and APPROVE: they act on generations and deploy no
   version, which is ``*`` in them);
4. replay: a sequence not above the last one accepted from the same signer for the same workflow
   (per workflow, so that a deployer deploying two workflows at once does not refuse itself).

Sequences are the deployer's clock in microseconds (:mod:`wfm.deploy`), so the downgrade rule
compares the sequences of different deployers: their clocks must agree to within the time between
two deployments of one workflow. The operations may also be signed by an ``operator`` (an
approval step may take only some of these roles: :mod:`agents.approvals`).

A firing is acted on only if every publication in it is admitted (:meth:`Trust.admit_trigger`,
:meth:`Trust.admit_status`; the firing's shape is :mod:`agents.firing`'s to check), so a broker can
neither start a generation nor end a job early:

- a **Trigger** must be signed by a deployer, an operator or a scheduler of the CA (without a CA:
  by the deployer key given or pinned, never pinning from a Trigger), signed less than
  ``max_age`` ago (within that the agent remembers the generation, so a replay is a duplicate)
  and not more than :data:`CLOCK_SKEW` ahead of the agent's clock;
- a **job status** must be signed by an agent of the CA whose name is the status's ``agentname``,
  and that must be the agent the deployment put the job on. Without a CA, agents have no keys and
  statuses are taken unsigned (the developer's loopback set-up).

Everything this decides on is in the envelope, the agent's configuration and its own state, and
``now`` is passed in, so a restarted agent replaying its journal decides the same again.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.errors import LocalError
from broker.language import Publication
from broker.transport.certificates import Uncertified, common_name, vouched
from broker.transport.revocation import Revocations
from workflow_messages.operations import OPERATIONS
from workflow_messages.signature import (
    Author,
    Signature,
    Signer,
    check_publication,
    check_signature,
    fingerprint,
    key_from_text,
    key_text,
)

__all__ = [
    "AGENT",
    "DEPLOYER",
    "HISTORIAN",
    "OPERATOR_ROLES",
    "TRIGGER_ROLES",
    "Certified",
    "Refusal",
    "Trust",
    "certified",
    "identity_author",
    "load_ca",
    "load_public_key",
    "signed_by",
]

log = logging.getLogger(__name__)

DEPLOYER = "deployer"  # the role (certificate OU) that may sign envelopes
AGENT = "agent"  # the role that signs job statuses
HISTORIAN = "historian"  # the role that signs history answers
OPERATOR_ROLES = (DEPLOYER, "operator")  # who may sign the operations (CANCEL, RERUN, HOLD, ...)
TRIGGER_ROLES = (DEPLOYER, "operator", "scheduler")  # who may sign a Trigger
CLOCK_SKEW = 300.0  # seconds a Trigger's signer's clock may be ahead of an agent's


class Refusal(Exception):
    """An envelope the agent will not act on: ``kind`` (signature, signer, downgrade, replay) for
    counting, ``who`` signed it (for logs: a name or key fingerprint, never a secret), ``reason``
    one line."""

    def __init__(self, kind: str, who: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.who, self.reason = kind, who, reason


@dataclass
class Trust:
    """The agent's deployer policy (``ca`` or ``trusted``, else trust on first use) and what it
    accepted so far, which :meth:`snapshot` keeps."""

    ca: x509.Certificate | None = None
    revocations: Revocations | None = None  # with ``ca``: the identities it no longer vouches for
    trusted: ec.EllipticCurvePublicKey | None = None
    pinned: ec.EllipticCurvePublicKey | None = None
    sequences: dict[tuple[str, str], int] = field(default_factory=dict)  # (signer, workflow) -> last
    # workflow -> (the version deployed last, '' once undeployed; the sequence that deployed it)
    since: dict[str, tuple[str, int]] = field(default_factory=dict)

    def admit(self, envelope: Publication, now: float) -> str:
        """Who signed ``envelope``, if this agent may act on it (and remember it did); else
        :class:`Refusal`. ``now`` is when it arrived (epoch seconds)."""
        try:
            signature = check_signature(envelope)
        except ValueError as error:
            raise Refusal("signature", "unknown signer", str(error)) from None
        command = envelope["command"]
        operation = command in OPERATIONS  # acts on a generation, deploys no version
        who = self._signer(signature, now, OPERATOR_ROLES if operation else (DEPLOYER,))
        workflow, version = str(envelope["applname"]), str(envelope["version"])
        sequence = signature.sequence
        deployed, at = self.since.get(workflow, (None, -1))
        if not operation and deployed is not None and version != deployed and sequence < at:
            newer = f"version {deployed} was deployed" if deployed else "the workflow was undeployed"
            raise Refusal(
                "downgrade", who, f"downgrade: {workflow} version {version} was signed before {newer}"
            )
        last = self.sequences.get((who, workflow), -1)
        if sequence <= last:
            reason = f"replay: sequence {sequence} of {workflow} is not above {last}, the last accepted"
            raise Refusal("replay", who, reason)
        self.sequences[who, workflow] = sequence
        if operation:
            return who
        if command == "UNDEPLOY":
            self.since[workflow] = ("", sequence)
        elif version != deployed:
            self.since[workflow] = (version, sequence)
        return who

    def admit_trigger(self, trigger: Publication, now: float, max_age: float) -> str:
        """Who signed ``trigger``, if a generation may start on it; else :class:`Refusal`."""
        signature = _checked(trigger)
        who = self._signer(signature, now, TRIGGER_ROLES, pin=False)
        age = now - signature.sequence / 1e6
        if age > max_age:
            reason = f"stale: the Trigger was signed {age / 3600:.1f} h ago, more than {max_age / 3600:g} h"
            raise Refusal("stale", who, reason)
        if age < -CLOCK_SKEW:  # else it could be replayed for as long after its generation is forgotten
            reason = f"the Trigger was signed {-age:.0f} s ahead of this agent's clock"
            raise Refusal("stale", who, reason)
        return who

    def admit_status(self, status: Publication, now: float, agent: str | None) -> str:
        """Who signed ``status``, if the agent ``agent`` its job is deployed on did (None: the
        deployment does not say; then any agent may sign for itself; several, space-separated:
        the job's agent and its standbys, any of which may run it); else :class:`Refusal`.
        Without a CA: "" (statuses are not signed)."""
        if self.ca is None:
            return ""
        signer = signed_by(status, self.ca, now, (AGENT,), self.revocations)
        name, who = signer.name, str(signer)
        claimed = status.get("agentname")
        if claimed != name:
            raise Refusal("signer", who, f"{who} signed a status of agent {claimed!r}")
        if agent is not None and name not in agent.split():  # its agent, or one of its standbys
            job = status.get("jobname")
            on = " or ".join(agent.split())
            raise Refusal("signer", who, f"{who} signed a status of {job}, which is deployed on {on}")
        return who

    def _signer(self, signature: Signature, now: float, roles: tuple[str, ...], pin: bool = True) -> str:
        """Who made ``signature``, if of one of ``roles`` here; pins the first key without a policy
        (if ``pin``)."""
        key, certificate = signature.key, signature.certificate
        if self.ca is not None:
            if certificate is None:
                reason = f"the signer has no certificate (this agent takes {roles[0]}s of its CA only)"
                raise Refusal("signer", fingerprint(key), reason)
            return str(certified(certificate, self.ca, now, roles, self.revocations))
        if certificate is not None:
            reason = "signed with a certificate: start the agent with --tls DIR to check it"
            raise Refusal("signer", fingerprint(key), reason)
        expected = self.trusted or self.pinned
        if expected is None:
            if not pin:
                raise Refusal("signer", fingerprint(key), "no deployer key is pinned yet")
            self.pinned = key
            log.warning(
                "TRUST ON FIRST USE: pinned the deployer key %s; envelopes signed by any other key "
                "are refused from now on (wfm agent --trust KEYFILE names the key instead)",
                fingerprint(key),
            )
            return fingerprint(key)
        if key != expected:
            why = "the key given with --trust" if self.trusted else "the deployer key pinned on first use"
            raise Refusal("signer", fingerprint(key), f"signer {fingerprint(key)} is not {why}")
        return fingerprint(key)

    def snapshot(self) -> dict[str, Any]:
        """What was accepted, as JSON-able data (the policy comes from the command line)."""
        pinned = None if self.pinned is None else key_text(self.pinned)
        return {
            "pinned": pinned,
            "sequences": [[who, workflow, n] for (who, workflow), n in self.sequences.items()],
            "since": [[workflow, version, n] for workflow, (version, n) in self.since.items()],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot["pinned"] is not None:
            self.pinned = key_from_text(snapshot["pinned"])
        self.sequences = {(who, workflow): n for who, workflow, n in snapshot["sequences"]}
        self.since = {workflow: (version, n) for workflow, version, n in snapshot["since"]}


def signed_by(
    publication: Publication,
    ca: x509.Certificate,
    now: float,
    roles: tuple[str, ...] | None = None,
    revocations: Revocations | None = None,
) -> Certified:
    """Who signed ``publication`` with a certificate :func:`certified` takes; else :class:`Refusal`
    (unsigned, tampered with, signed by a bare key or by a certificate it does not take)."""
    signature = _checked(publication)
    if signature.certificate is None:
        reason = f"the {publication.cls} is not signed by a certificate"
        raise Refusal("signer", fingerprint(signature.key), reason)
    return certified(signature.certificate, ca, now, roles, revocations)


def _checked(publication: Publication) -> Signature:
    try:
        return check_publication(publication)
    except ValueError as error:
        raise Refusal("signature", "unknown signer", str(error)) from None


@dataclass(frozen=True, slots=True)
class Certified:
    """Who a certificate of the CA names: ``name`` (CN), ``role`` (OU) and how logs say it."""

    name: str
    role: str

    def __str__(self) -> str:
        return f"{self.role or 'no role'} {self.name}"


def certified(
    certificate: x509.Certificate,
    ca: x509.Certificate,
    now: float,
    roles: tuple[str, ...] | None = None,
    revocations: Revocations | None = None,
) -> Certified:
    """Who ``certificate`` names, if ``ca`` issued it, it is valid ``now``, its role is one of
    ``roles`` (None: any) and ``revocations`` (``wfm certs revoke``) do not list it; else
    :class:`Refusal` of kind ``signer`` (``revoked`` for a revoked one)."""
    name = common_name(certificate) or fingerprint(certificate.public_key())  # type: ignore[arg-type]
    units = certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    found = Certified(name, ", ".join(str(unit.value) for unit in units))
    who = str(found)
    try:
        vouched(certificate, ca, now, name)
    except Uncertified as error:
        raise Refusal("signer", who, str(error)) from None
    if roles is not None and (len(units) != 1 or found.role not in roles):
        raise Refusal("signer", who, f"{name} has role {found.role or 'none'}, not {' or '.join(roles)}")
    if revocations is not None and revocations.revoked(certificate):
        raise Refusal("revoked", who, f"{name}'s certificate is revoked (wfm certs revoke)")
    return found


def identity_author(directory: Path, name: str) -> Author:
    """Who signs as the TLS identity ``DIR/NAME.key`` and ``DIR/NAME.crt`` (``wfm certs``): an
    agent its statuses, a historian its answers, an asker its queries, an operator its Triggers
    and envelopes. LocalError (one line) if the files cannot be used."""
    try:
        signer = Signer.from_files(directory / f"{name}.key", directory / f"{name}.crt")
    except OSError as error:
        raise LocalError(f"identity {name}: cannot read {error.filename}: {error.strerror}") from None
    except ValueError as error:
        raise LocalError(f"identity {name}: {error}") from None
    certificate = x509.load_der_x509_certificate(base64.b64decode(signer.credential.partition(":")[2]))
    units = certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    role = str(units[0].value) if units else "identity"
    return Author(signer, f"{role} {name}")


def load_ca(directory: Path) -> x509.Certificate:
    """``DIR/ca.crt``: the CA whose deployers an agent started with ``--tls DIR`` trusts."""
    path = directory / "ca.crt"
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except OSError as error:
        raise LocalError(f"cannot read the CA certificate {path}: {error.strerror}") from None
    except ValueError:
        raise LocalError(f"{path} is not a PEM certificate") from None


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """The deployer key an agent started with ``--trust KEYFILE`` takes envelopes from (a PEM
    public key, as ``wfm deploy`` prints it)."""
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as error:
        raise LocalError(f"cannot read the deployer key {path}: {error.strerror}") from None
    except ValueError:
        raise LocalError(f"{path} is not a PEM public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise LocalError(f"{path} is not an ECDSA P-256 public key")
    return key
