"""The operator's key: who signs the AGENT_CTL envelopes ``wfm deploy``, ``wfm undeploy``, ``wfm
cancel`` and ``wfm rerun`` send, and the Triggers of ``wfm trigger``, ``wfm schedule`` and the
dashboard (:func:`signer_of`).

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
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agents.trust import identity_author
from broker.errors import LocalError
from broker.transport.tls import Identity
from wfm.state import state_home
from workflow_messages.signature import Author, Signer, fingerprint

__all__ = ["Deployer", "default_key", "local_deployer", "signer_of", "tls_deployer"]

Deployer = Author  # the name the commands that sign know it by

log = logging.getLogger(__name__)


def signer_of(tls: Identity | None, key: Path | None = None) -> Deployer:
    """Who signs for a command: its TLS identity, else the local deployer key (``key``, by default
    :func:`default_key`), which agents without TLS pinned or were given with ``--trust``."""
    return tls_deployer(tls.directory, tls.name) if tls is not None else local_deployer(key or default_key())


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
    """The signer of the TLS identity ``DIR/NAME.key`` and ``DIR/NAME.crt`` (see ``wfm certs``):
    agents check its role for what it signs."""
    return identity_author(directory, name)


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
