"""Signed cancels: with TLS, who cancels a retained publication is who signed the cancel.

A retained publication whose cancel policy is ``originator`` may be cancelled by its publisher's
identity only, and the cancel is flooded to every broker that keeps a copy. Were the canceller
the identity its edge broker names (``Cancel.by``), any broker could cancel any publication by
naming its publisher: a neighbour's word cannot be checked. So with TLS the client signs its
cancel with its identity's key (:func:`signed`): ECDSA P-256 over the canonical bytes of
:func:`signed_bytes` (the tag :data:`FORMAT`, the message id it names and ``at``, when it was
signed), and the cancel carries the certificate. Every broker that takes a cancel off a link
checks it (:class:`CancelCheck`) before its router sees it, and the router takes ``by`` as
the check left it:

- from a client: the signature must verify, by a certificate of the CA, valid now, not revoked,
  naming the client's own identity, and be dated at most ``CANCEL_SKEW`` ahead of the broker's
  clock; anything else is refused (``Refuse``) and counted (``link.cancel_refused``);
- from a neighbour: ``by`` becomes the identity that signed it, or nobody ("") when the
  signature does not hold (counted ``link.cancel_unverified``): such a cancel still ends a
  retained publication whose policy is ``any``, never one whose policy is ``originator``.

A signature says who and when, not which publication (the client names it by its message id,
which its publisher may use again): so a signed cancel ends only the publications its
publisher's edge broker accepted before it was signed, or less than ``CANCEL_SKEW`` after
(``broker.routing.retained``), and a broker that kept a signed cancel cannot replay it against
a publication published again under the same id later. The check runs in the adapter, before
the cancel is logged: the log (and a site's replicated log) holds its verdict, so a replay, or
another member of a site, decides the same whatever the revocation list says by then.

Without TLS nothing is signed, and ``by`` is the client's name as its edge broker knew it and
as neighbours say (the developer's loopback set-up, where a client may claim any name anyway).
"""

from __future__ import annotations

import functools

import msgpack
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from broker.messages import CANCEL_SKEW, Cancel
from broker.transport.certificates import Uncertified, common_name, vouched
from broker.transport.revocation import Revocations
from broker.transport.tls import Identity

__all__ = ["FORMAT", "CancelCheck", "signed", "signed_bytes"]

FORMAT = "wfm-cancel-1"


def signed_bytes(mid: str, at: float) -> bytes:
    """What a cancel's signature covers: the tag, the message id it names and when it was signed."""
    return msgpack.packb([FORMAT, mid, float(at)], use_bin_type=True)  # type: ignore[no-any-return]


def signed(identity: Identity, ref: str, mid: str, at: float) -> Cancel:
    """The cancel ``ref`` of ``mid``, signed at ``at`` (epoch seconds) with ``identity``'s key
    (``DIR/NAME.key``, read now: cancels are rare), carrying its certificate."""
    key_path, cert_path = (
        identity.directory / f"{identity.name}.key",
        identity.directory / f"{identity.name}.crt",
    )
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path} is not an ECDSA key: it cannot sign a cancel")
    certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    signature = key.sign(signed_bytes(mid, at), ec.ECDSA(hashes.SHA256()))
    return Cancel(
        ref,
        mid,
        at=float(at),
        signer=certificate.public_bytes(serialization.Encoding.DER),
        signature=signature,
    )


class CancelCheck:
    """Who signed a cancel, as the deployment's CA (``DIR/ca.crt``) and its revocation list say."""

    def __init__(self, revocations: Revocations) -> None:
        self.revocations = revocations

    def signer(self, cancel: Cancel, now: float) -> str:
        """The identity that signed ``cancel``, if it is signed, the signature is that identity's
        over its message id and time, by a certificate of the CA valid ``now`` and not revoked,
        dated at most ``CANCEL_SKEW`` ahead of ``now``; else ValueError, in one line."""
        if cancel.at is None:
            raise ValueError("the cancel is not signed")
        certificate = _certificate(cancel.signer)
        name = common_name(certificate)
        if not name:
            raise ValueError("the cancel's certificate names no identity")
        vouched(certificate, self.revocations.ca, now, name)
        if self.revocations.revoked(certificate):
            raise Uncertified(f"{name}'s certificate is revoked (wfm certs revoke)")
        key = certificate.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError(f"{name}'s certificate holds no ECDSA key")
        try:
            key.verify(cancel.signature, signed_bytes(cancel.mid, cancel.at), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise ValueError(f"the cancel's signature is not {name}'s over it") from None
        if cancel.at > now + CANCEL_SKEW:
            raise ValueError(f"the cancel is dated {cancel.at - now:.0f} s ahead of this broker's clock")
        return name


@functools.lru_cache(maxsize=256)  # a few identities cancel: parse each certificate once
def _certificate(der: bytes) -> x509.Certificate:
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        raise ValueError("the cancel's certificate is not a DER certificate") from None
