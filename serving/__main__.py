"""`python -m serving` runs `ocr-serve`."""

from serving.cli import main

raise SystemExit(main())
