"""Load and accuracy tooling for the OCR server: real document pages, CER measurement, reports."""
