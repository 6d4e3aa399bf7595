"""The keys and certificates of a secured deployment: TLS between every process and the SuperLink, and each
owner's SuperNode authenticated by a key of its own (Flower's SuperNode authentication), so that a node is the
owner whose key it holds, not whoever connects first.

    RUN/deployment/credentials/ca.pem            a certificate authority made for this federation (its key is
                                                 deleted once the SuperLink's certificate is signed)
    RUN/deployment/credentials/superlink.pem     the SuperLink's certificate (for its host) and key
    RUN/deployment/credentials/superlink.key
    RUN/deployment/credentials/owners/<owner>    each owner's private key (P-384, OpenSSH format: what
    RUN/deployment/credentials/owners/<owner>.pub  `flower-supernode --auth-supernode-private-key` reads) and
                                                 the public key the server registers (`flwr supernode register`)

On separate machines each owner makes its own key pair and hands only the public key to the server's operator;
here one process plays every part and writes them all (docs/guides/federated.md gives the commands). Private
keys are written readable by their owner only (0600).
"""

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from redkit.names import check_name

VALID_FOR = datetime.timedelta(days=7)  # a local federation's certificates outlive its run, not much more
CURVE = ec.SECP384R1  # P-384: the curve Flower's guide uses for SuperNode keys (any NIST curve is accepted)


@dataclass(frozen=True)
class TLSFiles:
    ca: Path  # what every client trusts (--root-certificates, root-certificates in FLWR_HOME)
    certificate: Path  # the SuperLink's (--ssl-certfile)
    key: Path  # the SuperLink's private key (--ssl-keyfile)


def write_private(path: Path, data: bytes) -> None:
    """`data` at `path`, readable by its owner only, never for a moment by anyone else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_tls(directory: Path, host: str) -> TLSFiles:
    """A new certificate authority and the SuperLink's certificate for `host` (an IP address or a DNS name)
    signed by it; the authority's key is not kept (nothing else is to be signed with it)."""
    directory = Path(directory)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, link_key = ec.generate_private_key(CURVE()), ec.generate_private_key(CURVE())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("redkit federation CA"))
        .issuer_name(_name("redkit federation CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA384())
    )
    try:
        subject_alt = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        subject_alt = x509.DNSName(host)
    link = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca.subject)
        .public_key(link_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName([subject_alt]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA384())
    )
    files = TLSFiles(directory / "ca.pem", directory / "superlink.pem", directory / "superlink.key")
    directory.mkdir(parents=True, exist_ok=True)
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.certificate.write_bytes(link.public_bytes(serialization.Encoding.PEM))
    write_private(
        files.key,
        link_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return files


def write_owner_key(directory: Path, owner: str) -> tuple[Path, Path]:
    """(private key, public key) of a new key pair for `owner`, in OpenSSH format."""
    private = Path(directory) / check_name(owner, "owner", "a SuperNode key")
    key = ec.generate_private_key(CURVE())
    write_private(
        private,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        ),
    )
    public = private.with_name(f"{owner}.pub")
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n"
    )
    return private, public
