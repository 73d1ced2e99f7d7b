"""The model, at the bottom: what a RunnerGroup says (`spec`), which jobs its labels take (`labels`),
and the names of its runners (`names`). Pure: imports nothing above it and does no I/O.
"""
