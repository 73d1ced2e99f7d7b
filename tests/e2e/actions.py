"""GitHub's actions/checkout and actions/cache served by the test Gitea, for `uses:` in workflows.

The test Gitea resolves `uses: actions/checkout@v4` against itself (`DEFAULT_ACTIONS_URL = self`, see
harness.py), as a Gitea without internet access or with its own mirrors does. `publish` pushes the
archives of `../shared/peers/` (MIT; origin and checksums in its README) as the repositories
`actions/checkout` and `actions/cache`, each with its full version tag and `v4`. They are test peers,
like Gitea: not part of the product. TEST HARNESS ONLY.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from urllib.parse import quote, urlsplit

from tests.e2e.harness import ADMIN, PASSWORD, Gitea

ROOT = Path(__file__).resolve().parents[2]
OWNER = "actions"
# name: (version, sha256 of the archive), as ../shared/peers/README.md lists them
ACTIONS = {
    "checkout": ("v4.4.0", "7831c7957ab9fee61e0a6bf57383a60b7fc9bbce8cb2139e62276a5f014053e5"),
    "cache": ("v4.3.0", "000abc5cbfcb41b835b7db3acb927dd34225fe24592dff8189a9b98ed61ade98"),
}


def shared_peers() -> Path:
    """The folder of the shared test peers: $GRS_SHARED_PEERS, else ../shared/peers beside the checkout."""
    return Path(os.environ.get("GRS_SHARED_PEERS") or ROOT.parent / "shared" / "peers")


def archive(name: str) -> Path:
    """The checked archive of one action."""
    version, sha256 = ACTIONS[name]
    path = shared_peers() / f"actions-{name}-{version}.tar.gz"
    if not path.is_file():
        raise RuntimeError(f"missing {path}: the shared test peers belong beside the checkout (or $GRS_SHARED_PEERS)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise RuntimeError(f"{path}: sha256 {digest}, expected {sha256}")
    return path


def publish(gitea: Gitea, workdir: Path, names: tuple[str, ...] = tuple(ACTIONS)) -> None:
    """Push each action into the Gitea as `actions/NAME`, tagged with its version and `v4`."""
    gitea.api("POST", "/orgs", {"username": OWNER})
    for name in names:
        version, _ = ACTIONS[name]
        tree = workdir / f"{name}-{version}"
        shutil.rmtree(tree, ignore_errors=True)
        with tarfile.open(archive(name)) as tar:
            tar.extractall(workdir, filter="data")
        # Its own workflows would queue runs in the test Gitea that nothing serves.
        shutil.rmtree(tree / ".github", ignore_errors=True)
        push_tree(gitea, tree, f"{OWNER}/{name}", tags=(version, version.split(".", 1)[0]))


def push_tree(gitea: Gitea, tree: Path, repo: str, *, tags: tuple[str, ...], ca: Path | None = None) -> None:
    """Create `repo` (its owner must exist) and push the folder `tree` as its one commit, with `tags`;
    over HTTPS trusting `ca`."""
    owner, name = repo.split("/")
    gitea.api("POST", f"/orgs/{owner}/repos", {"name": name, "default_branch": "main"})
    url = urlsplit(gitea.url)
    remote = f"{url.scheme}://{ADMIN}:{quote(PASSWORD)}@{url.netloc}/{repo}.git"
    env = {**os.environ, "GIT_SSL_CAINFO": str(ca)} if ca else None  # (the variable wins over git's config)
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", f"{name} {tags[0]}"],
        *(["tag", tag] for tag in tags),
        ["push", "-q", remote, "main", *tags],
    ):
        done = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, env=env)
        if done.returncode:
            raise RuntimeError(f"git {args[0]} in {tree}: {done.stderr.strip()}")
