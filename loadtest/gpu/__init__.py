"""The GPU check's benchmark, run on a GPU machine by `scripts/gpu-check.sh`
(`python -m loadtest.gpu`)."""
