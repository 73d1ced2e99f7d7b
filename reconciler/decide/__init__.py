"""The decisions, above the model: what each runner is doing (`phases`), what a group should do now
(`plan`), which group serves each queued job (`assign`) and which groups may take their scope's jobs
(`ownership`), the status a group reports (`status`), why its jobs wait (`waiting`), which Gitea
instance each group serves (`instances`). Pure: no I/O, nothing of the Kubernetes or Gitea side; the
loop calls them with what it read.
"""
