"""`ocr-batch`: OCR files, folders and globs into an output folder, resumably.

One plan (`plan`: the documents, the output folder's manifest, the pages to do) and three drivers:
in process (`local`: the server's runtime without HTTP), on a server (`remote`: its jobs API) and
on Ray Data (`ray_driver`, `ray_stages`). None of it is the server's: the jobs API runs on
`serving.jobs`, which imports nothing from here.
"""
