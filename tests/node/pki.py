"""The test node's certificates, made with the openssl CLI: one CA, and the leaf certificates a
one-node cluster needs (the API server's serving certificate, the kubelet's client and serving
certificates, the API server's client certificate towards the kubelet).

TEST HARNESS ONLY: keys are unencrypted files in the cluster's scratch folder.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


class Authority:
    """A self-signed CA in `folder`, and the certificates it signs there."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = Pair(folder / "ca.crt", folder / "ca.key")
        _openssl("genrsa", "-out", str(self.ca.key), "2048", cwd=folder)
        _openssl(
            "req", "-x509", "-new", "-key", str(self.ca.key), "-subj", "/CN=grs-test-ca",
            "-days", "7", "-out", str(self.ca.cert), cwd=folder,
        )  # fmt: skip

    def issue(self, name: str, *, cn: str, org: str = "", ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> Pair:
        """A leaf certificate for `cn` (and `org`), valid for TLS server and client use."""
        pair = Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        _openssl("genrsa", "-out", str(pair.key), "2048", cwd=self.dir)
        csr = self.dir / f"{name}.csr"
        _openssl("req", "-new", "-key", str(pair.key), "-subj", subject, "-out", str(csr), cwd=self.dir)
        ext = self.dir / f"{name}.ext"
        alt = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n" + (f"subjectAltName={','.join(alt)}\n" if alt else "")
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca.cert), "-CAkey", str(self.ca.key),
            "-CAcreateserial", "-days", "7", "-extfile", str(ext), "-out", str(pair.cert), cwd=self.dir,
        )  # fmt: skip
        return pair
