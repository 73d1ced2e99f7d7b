"""The reconciler replicas' coordination in Redis: claims, leases, seats and their epoch
(`coordination`), and its Lua scripts (`scripts`). Only the reconciler uses it; the receiver never does.
"""
