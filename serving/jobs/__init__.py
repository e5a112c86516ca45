"""Batch jobs: the job store and runner behind `/v1/jobs`, and the offline `ocr-batch` CLI."""
