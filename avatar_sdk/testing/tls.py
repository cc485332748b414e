"""A throwaway private CA for tests: server contexts for ``StagingServer(ssl_context=...)``,
the CA file to trust (``AvatarSession(..., ca_file=...)``), and nothing on disk beyond a
temporary directory of its own.

Built with ``cryptography`` (already installed: aiortc depends on it). Keys are EC P-256,
certificates valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


class TestCA:
    """A private certificate authority. ``ca_file`` is its PEM certificate;
    :meth:`server_context` issues a leaf for some host names and IP addresses."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, name: str = "avatar-sdk test CA") -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="avatar-sdk-ca-"))
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = self._dir / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._issued = 0

    def client_context(self) -> ssl.SSLContext:
        """A verifying client context that trusts this CA (and nothing else)."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def server_context(self, *hosts: str) -> ssl.SSLContext:
        """A server context with a leaf for ``hosts`` (default ``127.0.0.1``, ``localhost``).

        ``context.load_cert_chain(str(other_ca.issue()))`` later swaps the certificate of a
        running server (new handshakes use it): a server whose certificate changes."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.issue(*hosts)))
        return context

    def issue(self, *hosts: str) -> Path:
        """A PEM file holding a new leaf certificate for ``hosts`` and its key."""
        names = hosts or ("127.0.0.1", "localhost")
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for host in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + _DAY)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        self._issued += 1
        chain = self._dir / f"leaf{self._issued}.pem"
        chain.write_bytes(
            leaf.public_bytes(serialization.Encoding.PEM)
            + key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return chain

    def cleanup(self) -> None:
        """Remove the temporary directory (the contexts already built keep working)."""
        shutil.rmtree(self._dir, ignore_errors=True)
