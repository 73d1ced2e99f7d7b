"""The job contract: the job model (`model`), the job records in Redis (`records`) and their Lua
scripts (`scripts`). The receiver writes the records from webhooks; the reconciler reads them, and
its poller writes Gitea's own listing.
"""
