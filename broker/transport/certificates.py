"""Whether a certificate someone signed with is one the deployment's CA vouches for now.

A TLS handshake checks the peer's certificate; a signature that travels inside a message (a
signed cancel here, envelopes, Triggers and statuses in ``agents.trust``) carries its signer's
certificate, which its reader checks itself, with these: issued by the CA, valid at the time the
message is handled. Revocation (``broker.transport.revocation``) and the role wanted are the
reader's to check besides.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

__all__ = ["Uncertified", "common_name", "vouched"]


class Uncertified(ValueError):
    """A certificate the CA does not vouch for now: why, in one line."""


def common_name(certificate: x509.Certificate) -> str:
    """The identity a certificate names (its CN; "" if none)."""
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def vouched(certificate: x509.Certificate, ca: x509.Certificate, now: float, name: str) -> None:
    """Nothing if ``ca`` issued ``certificate`` and it is valid ``now`` (epoch seconds); else
    :class:`Uncertified`, naming it ``name``."""
    if not _issued_by(certificate, ca):
        raise Uncertified(f"{name}'s certificate was not issued by this CA")
    at = datetime.fromtimestamp(now, UTC)
    if not certificate.not_valid_before_utc <= at <= certificate.not_valid_after_utc:
        raise Uncertified(f"{name}'s certificate is not valid now (expired or not yet valid)")


@functools.lru_cache(maxsize=256)  # a signature check per message: each certificate's once
def _issued_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
