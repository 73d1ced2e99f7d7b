"""The loop, on top: the only room that joins the Kubernetes side, the Gitea side and Redis. The
controller wakes on events and timers (`controller`), reads demand (`demand`) for the groups whose
API token proved their scope (`proofs`), and runs each group's pass (`scheduler`, `apply`) through
its seats (`seating`), registrations (`registrations`, and `registration_scopes`: whether a
registration token a group gives is of its scope), deletions and drains (`deletions`, `drain`),
evictions (`disruption`), refused Pods (`admission`) and reports (`reports`). Gitea's word on our
runners (`gitea_runners`, `gitea_rows`, `gitea_scopes`, `gitea_tokens`, `gitea_ghosts`) and the
polling fallback (`poller`) are here too, because they act on both sides.
"""
