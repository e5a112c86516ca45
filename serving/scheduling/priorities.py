"""The two classes of work: requests before batch-job pages, except for the jobs' share."""

INTERACTIVE = 0
"""Priority of requests from the OCR endpoints."""
BACKGROUND = 1
"""Priority of batch-job pages: they run when no interactive work waits, and while they have had
less than their share of the devices and CPU workers (`serving.scheduling.share`)."""
