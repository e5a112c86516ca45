"""`python -m loadtest.sim`: the scheduling simulator (`loadtest.sim.simulator`)."""

from __future__ import annotations

from loadtest.sim.simulator import main

raise SystemExit(main())
