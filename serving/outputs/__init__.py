"""Documents out: a document's OCR as plain text, hOCR, ALTO or a searchable PDF
(`formats.render`), from the data model in `document`."""
