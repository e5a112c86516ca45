"""Pure OCR stage functions: numpy in, numpy or dataclasses out; no I/O, no Paddle, no asyncio."""
