"""`python -m loadtest.bench`: `make bench` (`loadtest.bench.run`)."""

from __future__ import annotations

from loadtest.bench.run import main

raise SystemExit(main())
