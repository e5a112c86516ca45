"""The OCR server: HTTP, scheduling, CPU and device worker processes."""
