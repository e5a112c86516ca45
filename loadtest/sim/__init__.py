"""The scheduling simulator: the server's real batching, placement and admission code on simulated
devices, CPU workers and traffic, on a virtual clock (`python -m loadtest.sim`, `make simulate`)."""
