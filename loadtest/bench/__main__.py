"""`python -m loadtest.bench`: the same as `ocr-bench`."""

from __future__ import annotations

from loadtest.bench.cli import main

raise SystemExit(main())
