"""`python -m loadtest`: the same as `ocr-loadtest`."""

from __future__ import annotations

from loadtest.cli import main

raise SystemExit(main())
