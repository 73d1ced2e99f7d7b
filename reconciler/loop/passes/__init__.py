"""One group's pass (`group_pass`): its seats (`seating`), its runners' registrations
(`registrations`, and `registration_scopes`: whether a registration token a group gives is of its
scope), evictions (`disruption`), refused Pods (`admission`) and reports (`reports`). Imports retiring,
never the round.
"""
