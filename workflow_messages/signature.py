"""Signed AGENT_CTL envelopes: the bytes a deployer signs, and the check of a signature.

An agent runs the commands its envelopes name, so it must know who wrote them, whatever the brokers
in between did. The deployer signs each envelope with its ECDSA P-256 key (SHA-256); the signature
covers the envelope's :data:`SIGNED` fields in their canonical bytes: a msgpack array of the format
tag :data:`FORMAT` and those values in that order (strings as msgpack str, the sequence as an int).
msgpack gives one encoding per value, unlike ``str()`` of a publication, whose spelling could change
with the language without changing its meaning.

Three fields are added to the envelope:

- ``sequence``: an integer the deployer makes grow with every envelope it signs (microseconds of its
  clock), so an agent can refuse a replay;
- ``signer``: who signs, ``cert:`` and a base64 DER certificate (with TLS: the agent checks it was
  issued by its CA to a deployer) or ``key:`` and a base64 DER public key (without TLS: the agent
  trusts the first key it sees, or the one it was given);
- ``signature``: base64 of the DER ECDSA signature.

Other publications whose author matters (Triggers, job statuses, a historian's final answer) are
signed the same way over *all* their fields (:func:`publication_bytes`): the tag
:data:`PUBLICATION_FORMAT`, the class, and every field but ``signature`` sorted by name, so no field
rides along unsigned, whatever the class.

Who may sign is the reader's decision (:mod:`agents.trust`); this module only says whether the
signature is the signer's over these fields. Everything here is pure.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from broker.language import Publication, Value

__all__ = [
    "FIELDS",
    "FORMAT",
    "PUBLICATION_FORMAT",
    "SIGNATURE_FIELDS",
    "SIGNED",
    "Author",
    "Signature",
    "Signer",
    "check_publication",
    "check_signature",
    "fingerprint",
    "key_from_text",
    "key_text",
    "publication_bytes",
    "signed_bytes",
]

FORMAT = "wfm-agent-ctl-1"
SIGNED = ("agentname", "applname", "version", "command", "jobname", "content", "sequence", "signer")
FIELDS = (*SIGNED, "signature")  # every field of a signed envelope besides its class
PUBLICATION_FORMAT = "wfm-signed-1"
SIGNATURE_FIELDS = ("sequence", "signer", "signature")  # what signing adds to any other publication


def signed_bytes(fields: Mapping[str, Value]) -> bytes:
    """The canonical bytes of an envelope's :data:`SIGNED` fields (KeyError if one is missing)."""
    return msgpack.packb([FORMAT, *(fields[name] for name in SIGNED)], use_bin_type=True)


def publication_bytes(publication: Publication) -> bytes:
    """The canonical bytes a signed publication's signature covers: its class and every field but
    ``signature``, sorted by name (a field added on the way fails the check)."""
    fields = sorted((name, value) for name, value in publication.fields.items() if name != "signature")
    return msgpack.packb([PUBLICATION_FORMAT, publication.cls, fields], use_bin_type=True)


def fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """How logs and files name a public key: ``sha256:`` and the first 16 bytes of the hash of its
    DER form, in hex (what ``openssl pkey -pubin -outform DER | sha256sum`` starts with)."""
    return "sha256:" + hashlib.sha256(_der(key)).hexdigest()[:32]


def key_text(key: ec.EllipticCurvePublicKey) -> str:
    """A public key as one line: base64 of its DER form (SubjectPublicKeyInfo)."""
    return base64.b64encode(_der(key)).decode()


def key_from_text(text: str) -> ec.EllipticCurvePublicKey:
    """The ECDSA P-256 key of :func:`key_text`; ValueError (one line) for anything else."""
    try:
        key = serialization.load_der_public_key(_b64(text, "key"))
    except ValueError as error:
        raise ValueError(f"bad key: {str(error).splitlines()[0]}") from None
    return _p256(key)


@dataclass(frozen=True, slots=True)
class Signer:
    """A deployer's private key and the ``signer`` field naming it: its certificate, or its public key."""

    key: ec.EllipticCurvePrivateKey
    credential: str

    @classmethod
    def with_key(cls, key: ec.EllipticCurvePrivateKey) -> Signer:
        return cls(key, "key:" + key_text(key.public_key()))

    @classmethod
    def from_files(cls, key_path: Path, cert_path: Path) -> Signer:
        """The signer of a TLS identity's PEM files (``wfm certs issue``); OSError if one cannot be
        read, ValueError (one line) if they are not an ECDSA key and its certificate."""
        data = key_path.read_bytes()
        try:
            key = serialization.load_pem_private_key(data, password=None)
            certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except (ValueError, TypeError):
            raise ValueError(f"{key_path} or {cert_path} is not PEM") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an ECDSA key")
        try:
            return cls.with_certificate(key, certificate)
        except ValueError as error:
            raise ValueError(f"{cert_path}: {error}") from None

    @classmethod
    def with_certificate(cls, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> Signer:
        if certificate.public_key() != key.public_key():
            raise ValueError("the certificate is not for this key")
        der = certificate.public_bytes(serialization.Encoding.DER)
        return cls(key, "cert:" + base64.b64encode(der).decode())

    def sign(self, envelope: Publication, sequence: int) -> Publication:
        """``envelope`` with ``sequence``, ``signer`` and the ``signature`` over them all."""
        fields = {**envelope.fields, "sequence": sequence, "signer": self.credential}
        fields.pop("signature", None)
        signature = self.key.sign(signed_bytes(fields), ec.ECDSA(hashes.SHA256()))
        return Publication(envelope.cls, {**fields, "signature": base64.b64encode(signature).decode()})

    def sign_publication(self, publication: Publication, sequence: int) -> Publication:
        """``publication`` with ``sequence``, ``signer`` and the ``signature`` over all its fields
        (:func:`publication_bytes`)."""
        fields = {**publication.fields, "sequence": sequence, "signer": self.credential}
        fields.pop("signature", None)
        unsigned = Publication(publication.cls, fields)
        signature = self.key.sign(publication_bytes(unsigned), ec.ECDSA(hashes.SHA256()))
        return Publication(publication.cls, {**fields, "signature": base64.b64encode(signature).decode()})


@dataclass
class Author:
    """A :class:`Signer` and the sequence it signs under: its clock in microseconds, kept strictly
    increasing within one process (no state file to lose or share between two machines using one
    certificate); ``name`` says who it is in messages."""

    signer: Signer
    name: str
    last: int = field(default=0)

    def sign(self, envelope: Publication) -> Publication:
        """``envelope`` signed under a sequence above every one this author used before."""
        return self.signer.sign(envelope, self._next())

    def sign_publication(self, publication: Publication) -> Publication:
        """``publication`` (a Trigger, a job status) signed over all its fields under a new
        sequence: readers take it as the author's clock's reading of when it was signed."""
        return self.signer.sign_publication(publication, self._next())

    def _next(self) -> int:
        self.last = max(time.time_ns() // 1000, self.last + 1)
        return self.last


@dataclass(frozen=True, slots=True)
class Signature:
    """A signature that verified: the key that made it, its certificate if the signer sent one, and
    the envelope's sequence."""

    key: ec.EllipticCurvePublicKey
    certificate: x509.Certificate | None
    sequence: int


def check_signature(envelope: Publication) -> Signature:
    """Whose signature ``envelope`` carries; ValueError (one line) if it is unsigned, malformed,
    has fields the signature does not cover, or the signature is not the signer's over its fields."""
    fields = envelope.fields
    if "signature" not in fields:
        raise ValueError("unsigned envelope")
    extra = sorted(set(fields) - set(FIELDS))
    if extra:
        raise ValueError(f"field {extra[0]!r} is not covered by the signature")
    missing = [name for name in FIELDS if name not in fields]
    if missing:
        raise ValueError(f"signed envelope without {missing[0]!r}")
    return _verified(fields, signed_bytes(fields))


@functools.lru_cache(maxsize=4096)  # one Trigger is in every firing of its generation
def check_publication(publication: Publication) -> Signature:
    """Whose signature ``publication`` (a Trigger, a job status, any publication signed with
    :meth:`Signer.sign_publication`) carries over all its fields; ValueError (one line) if it is
    unsigned, malformed, or the signature is not the signer's."""
    fields = publication.fields
    if "signature" not in fields:
        raise ValueError(f"unsigned {publication.cls}")
    missing = [name for name in SIGNATURE_FIELDS if name not in fields]
    if missing:
        raise ValueError(f"signed {publication.cls} without {missing[0]!r}")
    return _verified(fields, publication_bytes(publication))


def _verified(fields: Mapping[str, Value], data: bytes) -> Signature:
    sequence, signer, signature = fields["sequence"], fields["signer"], fields["signature"]
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 0:
        raise ValueError("the sequence must be a non-negative integer")
    if not isinstance(signer, str) or not isinstance(signature, str):
        raise ValueError("signer and signature must be strings")
    key, certificate = _signer(signer)
    try:
        key.verify(_b64(signature, "signature"), data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ValueError(f"bad signature (signer {fingerprint(key)})") from None
    return Signature(key, certificate, sequence)


@functools.lru_cache(maxsize=256)  # a few signers sign everything: parse each certificate once
def _signer(text: str) -> tuple[ec.EllipticCurvePublicKey, x509.Certificate | None]:
    kind, _, data = text.partition(":")
    if kind == "key":
        return key_from_text(data), None
    if kind != "cert":
        raise ValueError(f"unknown signer kind {kind!r} (cert or key)")
    try:
        certificate = x509.load_der_x509_certificate(_b64(data, "certificate"))
    except ValueError as error:
        raise ValueError(f"bad certificate: {str(error).splitlines()[0]}") from None
    return _p256(certificate.public_key()), certificate


def _p256(key: object) -> ec.EllipticCurvePublicKey:
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("the signer's key is not an ECDSA P-256 key")
    return key


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the {what} is not base64") from None


def _der(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
