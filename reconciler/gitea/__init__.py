"""The Gitea side: the REST client (`api`) with its paging (`paging`), the runner registration RPC
(`register`) and registration's REST calls (`registration_tokens`: a scope's registration token, a
runner asked for by id). Knows nothing of Kubernetes or Redis; the loop joins it to them.
"""
