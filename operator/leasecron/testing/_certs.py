"""Key material for a throwaway control plane: one CA, the API server's serving certificate for
127.0.0.1/localhost, an admin client certificate in group `system:masters`, and the
service-account signing key pair.

Owns generating these files into a directory. Does not promise anything beyond tests: keys are
small (EC P-256), the CA lives for a day, nothing is protected on disk beyond file mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=1)
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True, kw_only=True)
class CertFiles:
    """Paths of the PEM files one cluster uses."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(
    *, subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + _VALIDITY)
    )


def _leaf(
    *,
    subject: x509.Name,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    alt_names: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject=subject, issuer=ca.subject, public_key=key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _new_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA certificate named `common_name`, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name)
    ca = (
        _builder(subject=subject, issuer=subject, public_key=key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return ca, key


def _write_service_account_keys(key_path: Path, pub_path: Path) -> None:
    """A fresh service-account signing key pair: the private key at `key_path` (mode 0600),
    the public key at `pub_path`. RSA, as the API server signs tokens with RS256 by default."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(key_path, key)
    pub_path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def generate(directory: Path) -> CertFiles:
    """Generate a fresh CA and every certificate and key the cluster needs into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _new_ca("leasecron-test-ca")
    serving, serving_key = _leaf(
        subject=_name("kube-apiserver"),
        ca=ca,
        ca_key=ca_key,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        alt_names=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        ],
    )
    admin, admin_key = _leaf(
        subject=_name("leasecron-admin", "system:masters"),
        ca=ca,
        ca_key=ca_key,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    files = CertFiles(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    _write_cert(files.ca_cert, ca)
    _write_cert(files.serving_cert, serving)
    _write_key(files.serving_key, serving_key)
    _write_cert(files.admin_cert, admin)
    _write_key(files.admin_key, admin_key)
    _write_service_account_keys(files.service_account_key, files.service_account_pub)
    return files
