"""Retiring runners: deleting runner Jobs (`deletions`) only once Gitea's word on them is read
(`vetting`: a runner's row, busy or idle; `rows`: a Job's row found and deleted; `tokens`: the API token
a deleted group drains with), a deleted group's drain (`drain`), and the sweep of rows no runner Job has
any more (`ghosts`). Imports neither the passes nor the round.
"""
