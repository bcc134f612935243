"""One deployer for the tests that feed agents their envelopes: agents act on signed ones only."""

from __future__ import annotations

from collections.abc import Iterable

from cryptography.hazmat.primitives.asymmetric import ec

from broker.language import Publication
from wfm.signing import Deployer
from workflow_messages.signature import Signer

__all__ = ["DEPLOYER", "signed"]

DEPLOYER = Deployer(Signer.with_key(ec.generate_private_key(ec.SECP256R1())), "the tests' deployer")


def signed(envelopes: Iterable[Publication]) -> list[Publication]:
    """``envelopes`` signed by :data:`DEPLOYER`, each under a new sequence (as a deploy sends them)."""
    return [DEPLOYER.sign(envelope) for envelope in envelopes]
