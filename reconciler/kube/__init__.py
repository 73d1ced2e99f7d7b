"""The Kubernetes side: the RunnerGroup CRD (`crd`, and `crd_apply` that installs it), our views of
the API objects (`objects`), the runner Job and Pod we build (`manifests`, with `dind`, `egress`,
`runner_cache`, and the admin's `placement` and `runner_policy`), the Events we write (`events`), and the modules
that talk to the API server: `api` and `informers`, the only ones that import kubernetes_asyncio,
and the chart's hooks over `api` (`crd_apply`, `secrets`). Never
imports the Gitea side; the loop joins the two.
"""
