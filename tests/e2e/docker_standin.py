"""A stand-in for `docker`, for running `deploy/release.sh --registry` as the README has users run it on a
machine with no Docker engine and no way to Docker Hub. TEST HARNESS ONLY.

`python -m tests.e2e.docker_standin VERB ARG...` (the test puts a `docker` script that runs this first on
PATH), with its memory of which image each reference names in the JSON file $DOCKER_STANDIN_STATE:

- `build ... -t REF CONTEXT`: the image of the Dockerfile at CONTEXT, which must be this repository: the
  one tests/images/build.sh builds with podman from the same Dockerfile and files (`scaler`, cached by its
  inputs; the build arguments VERSION and REVISION are that build's).
- `pull REF`: the image the harness builds in place of REF (`PULLED`); a reference with none is an error
  naming it, so a chart that starts pulling another image fails here first.
- `tag SRC DST`: DST names what SRC names.
- `push REF`: the image REF names, put into the registry REF's first part names (plain HTTP), through the
  registry's API (tests/node/registry.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.node.cluster import image
from tests.node.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
# What the harness builds in place of each image the chart pulls from elsewhere (tests/images/build.sh):
# Debian's redis-server for Redis, the runner image (act_runner, which serves `cache-server`) for the cache.
PULLED = {
    "docker.io/library/redis:7.2-alpine": "redis",
    "docker.io/gitea/act_runner:0.2.13": "runner",
}


def main(argv: list[str]) -> int:
    state = Path(os.environ["DOCKER_STANDIN_STATE"])
    names: dict[str, str] = json.loads(state.read_text()) if state.exists() else {}
    verb, args = argv[0], argv[1:]
    if verb == "build":
        if Path(args[-1]).resolve() != ROOT or "-t" not in args:
            return _refuse(f"build: expected `-t REF {ROOT}`, got {args}")
        names[args[args.index("-t") + 1]] = str(image("scaler")[1])
    elif verb == "pull":
        if args[-1] not in PULLED:
            return _refuse(f"pull: no stand-in for {args[-1]} (tests/e2e/docker_standin.py PULLED)")
        names[args[-1]] = str(image(PULLED[args[-1]])[1])
    elif verb == "tag":
        names[args[1]] = names[args[0]]
    elif verb == "push":
        host, _, rest = args[-1].partition("/")
        repository, _, tag = rest.rpartition(":")
        address, _, port = host.partition(":")
        Registry(state.parent, host=address, port=int(port)).push(Path(names[args[-1]]), repository, tag)
    else:
        return _refuse(f"{verb}: not a verb deploy/release.sh --registry uses")
    state.write_text(json.dumps(names))
    print(f"docker {verb} {' '.join(args)}: done (stand-in)")
    return 0


def _refuse(why: str) -> int:
    print(f"docker stand-in: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
