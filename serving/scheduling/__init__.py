"""Scheduling policy: batching, placement, cost model, admission, memory budget.

Pure: no processes, no I/O; the workers (`serving.workers`) execute what it decides.
"""
