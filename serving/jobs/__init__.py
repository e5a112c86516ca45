"""Batch jobs behind `/v1/jobs`: the store (`store`), the runner, a job's files and options."""
