"""The OCR service behind the HTTP layer and the jobs: one request end to end (`ocr`), the device
workers the config names (`devices`), and the parts wired from the config, started and stopped
together (`runtime`)."""
