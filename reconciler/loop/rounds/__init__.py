"""The round, on top of the loop: the controller's wake-ups (`controller`), demand read once per round
and each queued job given to one group (`demand`), each group's pass started, leased and retried
(`scheduler`), which groups are valid (`group_views`) and proven (`proofs`), and the tasks beside the
passes: the Gitea poll and the ghost sweep (`poller`), the managed webhooks (`webhooks`). Errors by
kind (`errors`). Imports the passes and retiring, never the other way.
"""
