"""One deployer for the tests that feed agents their envelopes: agents act on signed ones only."""

from __future__ import annotations

from collections.abc import Iterable

from cryptography.hazmat.primitives.asymmetric import ec

from broker.language import Publication
from wfm.signing import Deployer
from workflow_messages.signature import Signer

__all__ = ["DEPLOYER", "signed", "signed_trigger"]

DEPLOYER = Deployer(Signer.with_key(ec.generate_private_key(ec.SECP256R1())), "the tests' deployer")


def signed(envelopes: Iterable[Publication]) -> list[Publication]:
    """``envelopes`` signed by :data:`DEPLOYER`, each under a new sequence (as a deploy sends them)."""
    return [DEPLOYER.sign(envelope) for envelope in envelopes]


def signed_trigger(workflow: str, gid: str, date: str, at: float | None = None) -> Publication:
    """A Trigger of ``workflow`` for ``date`` (``YYYY.MM.DD``) signed by :data:`DEPLOYER`, as ``wfm
    trigger`` sends it (agents start a generation on nothing else), now or ``at`` (epoch seconds:
    agents refuse one signed too long before they get it)."""
    trigger = Publication("Trigger", {"applname": workflow, "GID": gid, "schedule": date})
    if at is None:
        return DEPLOYER.sign_publication(trigger)
    return DEPLOYER.signer.sign_publication(trigger, int(at * 1e6))
