"""The OCR engine as one process runs it: which backend and options each device runs and how each
stage reads its predictor's answers (`choice`), the whole pipeline in this process (`local`: the
offline engine limit, calibration, the GPU check), and the warm-up page a device worker must read
right before it reports ready (`warmup`)."""
