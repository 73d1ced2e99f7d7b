"""Entry point kept for the chart's secrets hook Job: `python -m reconciler.secrets NAMESPACE
SECRET:KEY...` runs `reconciler.kube.secrets`."""

from reconciler.kube.secrets import main

if __name__ == "__main__":
    raise SystemExit(main())
