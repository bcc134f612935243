"""``wfm certs``: a CA and identities whose role is in the certificate, keys only the owner reads,
nothing replaced without ``--force``, validity as asked; and the ``--tls``/``--identity`` options."""

from __future__ import annotations

import datetime
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from broker.transport.revocation import entry_name
from tests.wfm.test_cli import run
from wfm.certs import ROLES, ensure, listing


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def subject(cert: x509.Certificate) -> dict[str, str]:
    return {attribute.oid._name: str(attribute.value) for attribute in cert.subject}


def hosts(cert: x509.Certificate) -> list[str]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(name.value) for name in names]


@pytest.fixture
def ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    directory = tmp_path / "certs"
    assert run(capsys, "certs", "init", str(directory)) == (0, f"{directory / 'ca.crt'}\n", "")
    return directory


def test_each_role_is_in_its_certificate_signed_by_the_ca(
    ca: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    authority = load(ca / "ca.crt")
    for role in ROLES:
        code, out, err = run(capsys, "certs", "issue", str(ca), f"the-{role}", "--role", role)
        assert (code, err) == (0, ""), err
        cert = load(Path(out.strip()))
        assert subject(cert) == {
            "organizationName": "wfm",
            "organizationalUnitName": role,
            "commonName": f"the-{role}",
        }
        cert.verify_directly_issued_by(authority)
    assert hosts(load(ca / "the-broker.crt")) == ["localhost", "127.0.0.1"]
    with pytest.raises(x509.ExtensionNotFound):
        hosts(load(ca / "the-agent.crt"))
    code, out, _ = run(capsys, "certs", "list", str(ca))
    assert code == 0
    assert [line.split()[:2] for line in out.splitlines()][:2] == [["ca", "ca"], ["the-agent", "agent"]]
    code, out, _ = run(capsys, "certs", "list", str(ca), "-o", "json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(r["name"], r["role"]) for r in records][:2] == [
        ("ca", "ca"),
        ("the-agent", "agent"),
    ]
    assert records[0]["expires"] > "2026" and records[1]["hosts"] == []


def test_a_broker_certificate_names_the_hosts_given(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("certs", "issue", str(ca), "B1", "--role", "broker", "--host", "b1.example", "--host", "10.0.0.5")
    assert run(capsys, *argv)[0] == 0
    assert hosts(load(ca / "B1.crt")) == ["b1.example", "10.0.0.5"]
    code, _, err = run(capsys, "certs", "issue", str(ca), "a1", "--role", "agent", "--host", "x")
    assert code == 1 and "only a broker certificate has them" in err


def test_keys_are_readable_by_their_owner_only(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client")
    for key in ("ca.key", "alice.key"):
        assert stat.S_IMODE((ca / key).stat().st_mode) == 0o600, key
    assert b"PRIVATE KEY" in (ca / "alice.key").read_bytes()


def test_nothing_is_replaced_without_force(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    authority = (ca / "ca.crt").read_bytes()
    code, out, err = run(capsys, "certs", "init", str(ca))
    assert (code, out) == (1, "")
    assert err == f"wfm: error: {ca} already holds a CA (ca.crt): give --force to replace it\n"
    assert (ca / "ca.crt").read_bytes() == authority
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client")
    alice = (ca / "alice.key").read_bytes()
    code, _, err = run(capsys, "certs", "issue", str(ca), "alice", "--role", "deployer")
    assert code == 1 and "already holds identity alice (alice.crt): give --force" in err
    assert (ca / "alice.key").read_bytes() == alice
    assert run(capsys, "certs", "issue", str(ca), "alice", "--role", "deployer", "--force")[0] == 0
    assert (ca / "alice.key").read_bytes() != alice
    assert subject(load(ca / "alice.crt"))["organizationalUnitName"] == "deployer"
    assert run(capsys, "certs", "init", str(ca), "--force")[0] == 0
    assert (ca / "ca.crt").read_bytes() != authority


def test_validity_is_as_asked(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime.datetime.now(datetime.UTC)
    run(capsys, "certs", "issue", str(ca), "short", "--role", "monitor", "--days", "3")
    run(capsys, "certs", "issue", str(ca), "default", "--role", "monitor")
    for name, days in (("short", 3), ("default", 365)):
        cert = load(ca / f"{name}.crt")
        off = cert.not_valid_after_utc - now - datetime.timedelta(days=days)
        assert abs(off) < datetime.timedelta(minutes=1)
        assert cert.not_valid_before_utc <= now
    code, _, err = run(capsys, "certs", "issue", str(ca), "never", "--role", "monitor", "--days", "0")
    assert code == 2 and "--days" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("alice", "--role", "admin"), "'admin' is not one of 'broker', 'agent'"),
        (("ca", "--role", "client"), "'ca' is not an identity name"),
        (("al:ice", "--role", "client"), "'al:ice' is not an identity name"),
    ],
)
def test_bad_names_and_roles_are_refused(
    ca: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, _, err = run(capsys, "certs", "issue", str(ca), *argv)
    assert code in (1, 2) and message in err and err.count("\n") == 1, err


def test_issue_needs_a_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "certs", "issue", str(tmp_path), "alice", "--role", "client")
    assert code == 1 and err == f"wfm: error: no CA in {tmp_path}: make one with wfm certs init {tmp_path}\n"


def test_tls_options_go_together_and_name_what_is_missing(
    certs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = ("--broker", "socket://127.0.0.1:1/B1")
    code, _, err = run(capsys, "status", *broker, "--tls", str(certs))
    assert code == 2 and "--tls needs --identity NAME (or $WFM_IDENTITY)" in err
    code, _, err = run(capsys, "status", *broker, "--tls", str(certs), "--identity", "nobody")
    assert code == 2 and f"TLS identity nobody: no {certs / 'nobody.crt'} (see wfm certs)" in err
    monkeypatch.setenv("WFM_IDENTITY", "alice")
    code, _, err = run(capsys, "status", *broker)
    assert code == 2 and "--identity needs --tls DIR (or $WFM_TLS)" in err
    monkeypatch.setenv("WFM_TLS", str(certs))
    code, _, err = run(capsys, "status", *broker)  # the options are taken; nothing listens there
    assert code == 1 and "cannot connect to socket://127.0.0.1:1/B1" in err


def test_a_broker_without_tls_will_not_listen_beyond_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "broker", "--uri", "socket://0.0.0.0:1/B1")
    assert code == 1
    assert err == (
        "wfm: error: refusing to listen on 0.0.0.0 without TLS: anyone who reaches it could join the"
        " overlay; give --tls DIR --identity NAME, or --insecure to accept that\n"
    )


def test_the_new_roles_may_be_issued(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for role in ("operator", "scheduler", "historian"):
        code, out, err = run(capsys, "certs", "issue", str(ca), f"the-{role}", "--role", role)
        assert (code, err) == (0, ""), err
        assert subject(load(Path(out.strip())))["organizationalUnitName"] == role
    _, out, _ = run(capsys, "certs", "issue", "--help")
    assert "operator (trigger, cancel, rerun: not deploy)" in " ".join(out.split())


@pytest.mark.parametrize("umask", [0o000, 0o277])
def test_modes_are_explicit_whatever_the_umask(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], umask: int
) -> None:
    """Under ``umask 000`` the certificates were 0666 and the directory 0777 (anyone could swap
    ca.crt); under ``umask 277`` a key could not even be written. Now: keys 0600, certificates
    and the list 0644, the directory 0700, and no temporary file left."""
    directory = tmp_path / "certs"
    old = os.umask(umask)
    try:
        for argv in (
            ("certs", "init", str(directory)),
            ("certs", "issue", str(directory), "alice", "--role", "client"),
            ("certs", "issue", str(directory), "alice", "--role", "client", "--force"),
            ("certs", "revoke", str(directory), "alice"),
        ):
            code, _, err = run(capsys, *argv)
            assert code == 0, err
    finally:
        os.umask(old)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in directory.iterdir()}
    assert modes == {
        "ca.key": 0o600,
        "alice.key": 0o600,
        "ca.crt": 0o644,
        "alice.crt": 0o644,
        "ca.crl": 0o644,
    }
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def crl(directory: Path) -> x509.CertificateRevocationList:
    return x509.load_pem_x509_crl((directory / "ca.crl").read_bytes())


def test_revoke_lists_the_serial_in_a_crl_signed_by_the_ca(
    ca: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client")
    run(capsys, "certs", "issue", str(ca), "bob", "--role", "client")
    alice = load(ca / "alice.crt")
    code, out, err = run(capsys, "certs", "revoke", str(ca), "alice")
    assert (code, err) == (
        0,
        "",
    ) and out == f"{ca / 'ca.crl'}: revoked alice (serial {alice.serial_number:x})\n"
    authority = load(ca / "ca.crt")
    listed = crl(ca)
    assert listed.issuer == authority.subject and listed.is_signature_valid(authority.public_key())  # type: ignore[arg-type]
    assert [r.serial_number for r in listed] == [alice.serial_number]
    assert entry_name(listed[0]) == "alice"
    before = (ca / "ca.crl").read_bytes()
    code, out, _ = run(capsys, "certs", "revoke", str(ca), "alice")  # twice: the same list
    assert code == 0 and "alice (serial" in out and "was revoked already" in out
    assert (ca / "ca.crl").read_bytes() == before
    run(capsys, "certs", "revoke", str(ca), "bob")
    assert [entry_name(r) for r in crl(ca)] == ["alice", "bob"]
    code, out, _ = run(capsys, "certs", "list", str(ca))
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "REVOKED" in lines["alice"] and "REVOKED" in lines["bob"] and "REVOKED" not in lines["ca"]
    # alice gets a new certificate: the old one stays revoked, listed as replaced
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client", "--force")
    _, out, _ = run(capsys, "certs", "list", str(ca), "-o", "json")
    records = [json.loads(line) for line in out.splitlines()]
    alices = [(r["role"], r["revoked"] is not None) for r in records if r["name"] == "alice"]
    assert alices == [("client", False), (None, True)]
    assert [r["serial"] for r in records if r["revoked"] and r["role"] is None] == [
        f"{alice.serial_number:x}"
    ]


def test_revoking_an_unknown_identity_is_a_one_line_error(
    ca: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "certs", "revoke", str(ca), "nobody")
    assert (code, out) == (1, "")
    assert err == f"wfm: error: no identity nobody in {ca} (no nobody.crt): nothing to revoke\n"
    code, _, err = run(capsys, "certs", "revoke", str(ca), "ca")
    assert code == 1 and "'ca' is not an identity name" in err and err.count("\n") == 1
    assert not (ca / "ca.crl").exists()


def test_a_new_ca_starts_with_no_revocations(ca: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client")
    run(capsys, "certs", "revoke", str(ca), "alice")
    assert run(capsys, "certs", "init", str(ca), "--force")[0] == 0
    assert not (ca / "ca.crl").exists()


def test_ensure_issues_what_is_missing_and_reissues_an_identity_whose_role_changed(tmp_path: Path) -> None:
    """``wfm up`` keeps its certificates across runs; its historian, a monitor before it had a
    role of its own, gets a certificate of role historian on the next run."""
    ensure(tmp_path, {"historian": "monitor", "deployer": "deployer"})
    kept = (tmp_path / "deployer.crt").read_bytes()
    ensure(tmp_path, {"historian": "historian", "deployer": "deployer", "agentA": "agent"})
    roles = {issued.name: issued.role for issued in listing(tmp_path)}
    assert roles == {"ca": "ca", "agentA": "agent", "deployer": "deployer", "historian": "historian"}
    assert (tmp_path / "deployer.crt").read_bytes() == kept


def test_list_defaults_to_wfm_tls(
    ca: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every other command takes $WFM_TLS; certs list wanted its DIRECTORY given again."""
    run(capsys, "certs", "issue", str(ca), "alice", "--role", "client")
    monkeypatch.setenv("WFM_TLS", str(ca))
    code, out, _ = run(capsys, "certs", "list")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["ca", "alice"]
    monkeypatch.delenv("WFM_TLS")
    code, _, err = run(capsys, "certs", "list")
    assert code == 2 and "give DIRECTORY, or set WFM_TLS" in err
