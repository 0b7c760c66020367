"""A throw-away certificate authority for tests, made with the ``openssl`` command (Debian's ``openssl`` package):
a CA and the server certificates it signs (valid, expired, for other hosts), to test the agent's TLS over HTTPS."""

from __future__ import annotations

import os
import subprocess
from typing import NamedTuple, Sequence

__all__ = ["TestCA", "Issued"]


class Issued(NamedTuple):
    """``(certificate, key)``: paths of a PEM certificate and its private key."""

    certificate: str
    key: str


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {result.stdout.decode('utf-8', 'replace')}")


class TestCA:
    """A CA in ``directory`` (``NAME.pem``, ``NAME.key``); :attr:`ca_file` is what the agent's
    ``[Agent] CAFile=`` takes. ``issue`` makes a server certificate signed by it."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str, name: str = "ca") -> None:
        self.directory = directory
        self.name = name
        self.ca_file = os.path.join(directory, f"{name}.pem")
        self.ca_key = os.path.join(directory, f"{name}.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self.ca_key, "-out", self.ca_file, "-days", "2",
                 "-subj", f"/CN=pushwoosh-agent test CA {name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def issue(self, name: str = "server", hosts: Sequence[str] = ("127.0.0.1", "localhost"),
              expired: bool = False) -> Issued:
        """A server certificate for ``hosts`` (IP addresses or DNS names) signed by this CA;
        ``expired``: its validity ended a day ago."""
        key, csr, cert, ext = (os.path.join(self.directory, f"{name}.{kind}") for kind in ("key", "csr", "pem", "ext"))
        alt = ",".join(("IP:" if h.replace(".", "").isdigit() or ":" in h else "DNS:") + h for h in hosts)
        with open(ext, "w", encoding="ascii") as f:
            f.write(f"subjectAltName={alt}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={hosts[0] if hosts else name}")
        _openssl("x509", "-req", "-in", csr, "-CA", self.ca_file, "-CAkey", self.ca_key, "-CAcreateserial",
                 "-out", cert, "-days", "-1" if expired else "1", "-extfile", ext)
        return Issued(cert, key)
