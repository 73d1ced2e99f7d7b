"""The reconciler replicas' coordination in Redis: claims, leases, seats and their epoch
(`coordination`), the values it reads (`model`) and its Lua scripts (`scripts`). Only the reconciler
uses it; the receiver never does.
"""
