"""The soak test: steady real traffic against a real server, every process's memory, fds and
shared-memory segments sampled and judged (`python -m loadtest.soak`, `make soak`)."""
