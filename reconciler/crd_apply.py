"""Entry point kept for the chart's CRD hook Job: `python -m reconciler.crd_apply` runs
`reconciler.kube.crd_apply`."""

from reconciler.kube.crd_apply import main

if __name__ == "__main__":
    raise SystemExit(main())
