"""OCR as tools for agents over the Model Context Protocol (the official `mcp` SDK, the `mcp`
extra): `tools.py` (read a document, submit a job, follow it), `sources.py` (what a tool may read:
a file in `[mcp] read_folders`, a URL under `[input]`'s URL rules, or base64), `api.py` (each
tool call is the `/v1` request it stands for, made inside the server with the caller's key),
`endpoint.py` (`/mcp`, streamable HTTP) and `stdio.py` (`ocr-mcp`: the same tools over stdio,
forwarded to a running server's `/mcp`). docs/mcp.md."""
