"""`python -m serving.convert`: the model conversion (`serving.convert.run`)."""

from __future__ import annotations

from serving.convert.run import main

raise SystemExit(main())
