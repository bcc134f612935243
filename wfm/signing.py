"""The deployer's key: who signs the AGENT_CTL envelopes ``wfm deploy`` and ``wfm undeploy`` send.

With TLS (``--tls DIR --identity NAME``) the deployer signs with ``DIR/NAME.key`` and sends
``DIR/NAME.crt`` in each envelope; agents check that their CA issued it to a deployer. Without, a
developer's loopback set-up still signs: ``wfm deploy`` makes a local key on first use
(:func:`default_key`, mode 0600, its public half beside it as ``.pub`` for ``wfm agent --trust``)
and agents pin the first key they see. Either way agents never run what an unknown key signed.

Sequences are the deployer's clock in microseconds, kept strictly increasing within one process:
no state file to lose or share between two machines using one deployer certificate, and an
agent's replay check (:mod:`agents.trust`) holds as long as the clock does not go back.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from broker.errors import LocalError
from broker.language import Publication
from wfm.state import state_home
from workflow_messages.signature import Signer, fingerprint

__all__ = ["Deployer", "default_key", "local_deployer", "tls_deployer"]

log = logging.getLogger(__name__)


@dataclass
class Deployer:
    """A :class:`Signer` and its sequence; ``name`` says who it is in messages."""

    signer: Signer
    name: str
    last: int = field(default=0)

    def sign(self, envelope: Publication) -> Publication:
        """``envelope`` signed under a sequence above every one this deployer used before."""
        self.last = max(time.time_ns() // 1000, self.last + 1)
        return self.signer.sign(envelope, self.last)


def default_key() -> Path:
    """``$XDG_STATE_HOME/wfm/deployer.key`` (``~/.local/state/wfm/deployer.key`` by default)."""
    return state_home() / "deployer.key"


def local_deployer(path: Path) -> Deployer:
    """The deployer of the key at ``path``, made (with ``PATH.pub``) if there is none. Making it
    is logged at INFO only: an error of the command must stay its one line on stderr, and agents
    log the key they pin, loudly."""
    if not path.exists() and _create(path):
        log.info("made the deployer key %s (public key: %s.pub)", path, path)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as error:
        raise LocalError(f"cannot read the deployer key {path}: {error.strerror}") from None
    except (ValueError, TypeError):
        raise LocalError(f"{path} is not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise LocalError(f"{path} is not an ECDSA P-256 key")
    return Deployer(Signer.with_key(key), f"key {fingerprint(key.public_key())}")


def tls_deployer(directory: Path, name: str) -> Deployer:
    """The deployer of the TLS identity ``DIR/NAME.key`` and ``DIR/NAME.crt`` (see ``wfm certs``)."""
    key_path, cert_path = directory / f"{name}.key", directory / f"{name}.crt"
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except OSError as error:
        raise LocalError(f"deployer {name}: cannot read {error.filename}: {error.strerror}") from None
    except (ValueError, TypeError):
        raise LocalError(f"deployer identity {name}: {key_path} or {cert_path} is not PEM") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise LocalError(f"deployer identity {name}: {key_path} is not an ECDSA key")
    try:
        signer = Signer.with_certificate(key, certificate)
    except ValueError as error:
        raise LocalError(f"deployer identity {name}: {cert_path}: {error}") from None
    return Deployer(signer, f"deployer {name}")


def _create(path: Path) -> bool:
    """Write a new key to ``path`` (0600) and its public key to ``PATH.pub``, unless another process
    made ``path`` meanwhile: the key is written whole to a file of its own, then linked in place."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        finally:
            temporary.unlink()
        path.with_name(path.name + ".pub").write_bytes(public)
    except OSError as error:
        raise LocalError(f"cannot create the deployer key {path}: {error.strerror}") from None
    return True
