"""`python -m reconciler.secrets NAMESPACE SECRET:KEY...`: create the chart's generated secrets, once.

The Helm chart runs this as a pre-install/pre-upgrade hook Job instead of generating values with
`randAlphaNum` and `lookup` in templates: a render then carries no secret and is the same every time
(`helm template`, Argo CD, Flux), and a value, once created, is never replaced. Each SECRET:KEY gets a
random URL-safe value of 48 characters if it has none. The values are never printed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
from collections.abc import Sequence

from reconciler.kube.api import Kube, PermanentError, TransientError, api_client
from webhook_scaler import logs

log = logging.getLogger("reconciler.secrets")
ATTEMPTS = 5


def parse(argv: Sequence[str]) -> tuple[str, list[tuple[str, str]]]:
    """(namespace, [(secret, key)]) from the arguments; ValueError says what is wrong."""
    if len(argv) < 2:
        raise ValueError("usage: python -m reconciler.secrets NAMESPACE SECRET:KEY [SECRET:KEY...]")
    wanted = []
    for arg in argv[1:]:
        name, sep, key = arg.partition(":")
        if not (sep and name and key):
            raise ValueError(f"{arg!r} is not SECRET:KEY")
        wanted.append((name, key))
    return argv[0], wanted


async def ensure(namespace: str, wanted: list[tuple[str, str]], *, kubeconfig: str | None = None) -> None:
    """Give each (secret, key) a value unless it has one; retry transient errors a few times."""
    api = await api_client(kubeconfig)
    try:
        kube = Kube(api)
        for name, key in wanted:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    wrote = await kube.ensure_secret_key(namespace, name, key, lambda: secrets.token_urlsafe(36))
                except TransientError as exc:
                    if attempt == ATTEMPTS:
                        raise
                    log.warning("secret not written yet", extra={"secret": name, "error": str(exc)})
                    await asyncio.sleep(attempt)
                    continue
                log.info("secret ready", extra={"secret": name, "key": key, "written": wrote})
                break
    finally:
        await api.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit 0 when every key has a value, 1 on an API error, 2 on bad arguments."""
    logs.setup(level="INFO", fmt="json")
    try:
        namespace, wanted = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"reconciler.secrets: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(ensure(namespace, wanted))
    except (PermanentError, TransientError) as exc:
        print(f"reconciler.secrets: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
