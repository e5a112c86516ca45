"""`python -m loadtest.gpu`: the GPU check's benchmark (`loadtest.gpu.check`)."""

from __future__ import annotations

from loadtest.gpu.check import main

raise SystemExit(main())
