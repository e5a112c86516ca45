"""`python -m serving.mcp`: `ocr-mcp`."""

import sys

from serving.mcp.stdio import main

sys.exit(main())
