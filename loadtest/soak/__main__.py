"""`python -m loadtest.soak`: the soak test (`loadtest.soak.run`)."""

from __future__ import annotations

from loadtest.soak.run import main

raise SystemExit(main())
