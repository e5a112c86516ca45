"""`python -m serving.convert` (`make convert`, `make convert-int8`): the configured models as ONNX,
and as int8 calibrated on held-out document pages, before serving (`run`, `calibration`)."""
