"""An OCI registry on the node's address: Debian's docker-registry (the CNCF distribution, 2.8).

Docker-mode runners pull the images of `container:` jobs and `services:` from it, as users' runners
pull from theirs, over plain HTTP (each runner's dockerd is told `--insecure-registry` through the
group's `dindArgs`). Images go in from the oci-archive tars tests/images/build.sh makes, through the
registry's HTTP API (blobs, then the manifest), so no container engine runs on the host. The
registry runs as a process of ours, stopped by PID; its storage is in the test's folder.
TEST HARNESS ONLY.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

from tests.redis_server import die_with_parent, free_port, stop_process

BINARY = "docker-registry"


class Registry:
    """One registry serving `host:port` (a free port unless given) over HTTP, with its storage under `workdir`."""

    def __init__(self, workdir: Path, *, host: str, port: int | None = None) -> None:
        self.dir = workdir
        self.port = port or free_port()
        self.address = f"{host}:{self.port}"
        self.url = f"http://{self.address}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until it answers `/v2/`."""
        binary = shutil.which(BINARY)
        if binary is None:
            raise RuntimeError(f"no {BINARY}: install Debian's docker-registry (tests/setup.sh does)")
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.yml"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "version": 0.1,
                    "log": {"level": "warn", "accesslog": {"disabled": True}},
                    "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")}},
                    "http": {"addr": self.address},
                }
            )
        )
        self._log = (self.dir / "registry.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, "serve", str(config)], stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{BINARY} exited: see {self.dir}/registry.log")
            try:
                with urllib.request.urlopen(f"{self.url}/v2/", timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"{BINARY} did not answer on {self.url} within 30s")

    def stop(self) -> None:
        """Stop the registry (its storage goes with the test's folder)."""
        stop_process(self.proc, self._log, timeout=10)
        self.proc, self._log = None, None

    def push(self, archive: Path, repository: str, tag: str) -> str:
        """Push the single image of an oci-archive tar as `repository:tag`; return its reference here."""
        with tarfile.open(archive) as tar:
            index = json.load(_member(tar, "index.json"))
            (descriptor,) = index["manifests"]
            manifest_raw = _member(tar, _blob_path(descriptor["digest"])).read()
            manifest = json.loads(manifest_raw)
            for blob in [manifest["config"], *manifest["layers"]]:
                self._put_blob(repository, blob, _member(tar, _blob_path(blob["digest"])))
        media_type = manifest.get("mediaType") or descriptor["mediaType"]
        self._request("PUT", f"/v2/{repository}/manifests/{tag}", manifest_raw, {"Content-Type": media_type})
        return f"{self.address}/{repository}:{tag}"

    def _put_blob(self, repository: str, blob: dict[str, Any], data: IO[bytes]) -> None:
        digest = blob["digest"]
        try:
            self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
            return  # already there
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
        started = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        location = urljoin(self.url, started["Location"])
        sep = "&" if "?" in location else "?"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(blob["size"])}
        self._request("PUT", f"{location}{sep}digest={digest}", data, headers)

    def _request(
        self, method: str, path: str, body: bytes | IO[bytes] | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        """One call; returns the answer's headers, raises HTTPError for a non-2xx answer."""
        url = path if path.startswith("http") else f"{self.url}{path}"
        req = urllib.request.Request(url, method=method, data=body, headers=headers or {})
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
            return resp.headers


def _blob_path(digest: str) -> str:
    algorithm, hexdigest = digest.split(":", 1)
    return f"blobs/{algorithm}/{hexdigest}"


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    member = tar.extractfile(name)
    if member is None:
        raise RuntimeError(f"{tar.name!s}: no file {name}")
    return member
