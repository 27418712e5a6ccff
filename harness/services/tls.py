"""Throwaway TLS material for an etcd on 127.0.0.1: a CA, a server certificate and a client
certificate, made with the ``openssl`` command line (:func:`make_tls`).

The server certificate names ``127.0.0.1`` as an IP subject alternative name. It also
allows client authentication: etcd's JSON gateway dials its own gRPC server with it.
The client certificate is what a test's client presents when the member asks for one
(``--client-cert-auth``). Every key is an unencrypted P-256 key; every certificate lasts
a day. Nothing here is for production use.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsMaterial", "make_tls"]

#: The server's X.509v3 extensions (what Python's strict verification also asks for).
_SERVER = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

#: The client's X.509v3 extensions.
_CLIENT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class TlsMaterial:
    """The files of one throwaway CA, its server certificate and its client certificate."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_cert: bool = True) -> ssl.SSLContext:
        """An SSL context that trusts the CA and, unless told not to, presents the client
        certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        if with_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def make_tls(directory: Path) -> TlsMaterial:
    """Make a CA, a server and a client certificate in ``directory`` (created if missing).

    Raises:
        FileNotFoundError: no ``openssl`` on ``PATH``.
        RuntimeError: ``openssl`` failed (with the end of its output).
    """
    if shutil.which("openssl") is None:
        raise FileNotFoundError("openssl is not installed (apt-get install openssl)")
    directory.mkdir(parents=True, exist_ok=True)
    material = TlsMaterial(
        ca_cert=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )
    ca_key = directory / "ca.key"
    # fmt: off
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", ca_key, "-out", material.ca_cert, "-days", "1",
        "-subj", "/CN=nvrx-seghealth test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )
    # fmt: on
    _signed(directory, "server", "127.0.0.1", _SERVER, ca_key, material.ca_cert)
    _signed(directory, "client", "nvrx-seghealth test client", _CLIENT, ca_key, material.ca_cert)
    return material


def _signed(directory: Path, name: str, subject: str, extensions: str, ca_key, ca_cert) -> None:
    """Make ``<name>.key`` and ``<name>.crt`` signed by the CA, with ``extensions``."""
    request, extension_file = directory / f"{name}.csr", directory / f"{name}.ext"
    extension_file.write_text(extensions)
    # fmt: off
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", directory / f"{name}.key", "-out", request, "-subj", f"/CN={subject}",
    )
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca_cert, "-CAkey", ca_key,
        "-CAcreateserial", "-days", "1", "-extfile", extension_file,
        "-out", directory / f"{name}.crt",
    )
    # fmt: on


def _openssl(*arguments: str | Path) -> None:
    command = ["openssl", *map(str, arguments)]
    done = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
