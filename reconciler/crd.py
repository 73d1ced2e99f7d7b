"""Entry point kept for the CRD file's header: `python -m reconciler.crd` prints the RunnerGroup CRD
(`reconciler.kube.crd`)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("reconciler.kube.crd", run_name="__main__", alter_sys=True)
