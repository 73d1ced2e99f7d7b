"""Reads the schema of a PodTemplateSpec (`pod_schema`): the API server's own, once per process, and
the one this package ships until then.

The core group's OpenAPI v3 document (`/openapi/v3/api/v1`) is served to every authenticated client
(the `system:discovery` ClusterRole), so this needs no RBAC of its own. Only the schemas a
PodTemplateSpec reaches are kept. The shipped one (`pod_template_schema.json`, the same closure read
from Kubernetes 1.36 by `python -m reconciler.kube.openapi KUBECONFIG`) holds podTemplates to a schema
even where the API server's cannot be read. Must not decide anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from functools import cache
from pathlib import Path
from typing import Any

from reconciler.kube.api import REQUEST_TIMEOUT, Kube, api_client
from reconciler.kube.pod_schema import PodSchema

log = logging.getLogger(__name__)
PATH = "/openapi/v3/api/v1"
SHIPPED = Path(__file__).with_name("pod_template_schema.json")


@cache
def shipped_pod_schema() -> PodSchema:
    """The PodTemplateSpec schema this package ships (`SHIPPED`)."""
    return PodSchema(json.loads(SHIPPED.read_text(encoding="utf-8")))


async def pod_schema(kube: Kube) -> PodSchema:
    """The cluster's PodTemplateSpec schema; raises on any failure (the caller retries)."""
    response: Any = await kube.api.call_api(
        PATH,
        "GET",
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=REQUEST_TIMEOUT * 4,
    )
    async with response:
        data = await response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {PATH}: HTTP {response.status}")
    schema = PodSchema.from_openapi(json.loads(data))
    log.info("pod schema read", extra={"schemas": len(schema.schemas), "bytes": len(data)})
    return schema


async def _print(kubeconfig: str) -> None:
    api = await api_client(kubeconfig)
    try:
        schema = await pod_schema(Kube(api))
    finally:
        await api.close()
    print(json.dumps(dict(sorted(schema.schemas.items())), indent=1, sort_keys=True))


if __name__ == "__main__":  # python -m reconciler.kube.openapi KUBECONFIG > reconciler/kube/pod_template_schema.json
    asyncio.run(_print(sys.argv[1]))
