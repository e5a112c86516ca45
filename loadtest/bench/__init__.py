"""Benchmarks and measurements beside the load test: `make bench` (`python -m loadtest.bench`), the
CPU engines, models, jobs' impact, memory peaks, shared-memory cost and Ray scaling (each
`python -m loadtest.bench.<module>`)."""
