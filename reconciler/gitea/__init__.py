"""The Gitea side: the REST client (`api`) with its paging (`paging`), and the runner registration
RPC (`register`). Knows nothing of Kubernetes or Redis; the loop joins it to them.
"""
