"""Scheduling policy: batching, placement, cost model, admission, memory budget.

No processes, and no I/O but what the memory budget asks the host once, to size itself (its
memory, the cgroup's limit, the size of /dev/shm): the workers (`serving.workers`) execute what
it decides.
"""
