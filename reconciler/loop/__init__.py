"""The loop, on top: the only room that joins the Kubernetes side, the Gitea side and Redis. Three rooms
of its own, each importing only those below it: the round (`rounds`: wake-ups, demand, the scheduler, the
proofs, the poll and the sweep, the managed webhooks), one group's pass (`passes`), and retiring runners
(`retiring`: deletion, vetting, drains, ghost rows); at the bottom what they all read: what the
controller remembers of each group (`state`) and where a group's runners live in Gitea (`scopes`).
"""
