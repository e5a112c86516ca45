"""Execution: the supervised CPU and device worker processes, shared memory, the watchdog."""
