"""Request bodies into BGR pages: images and PDFs read (`readers`), a document's pages counted,
sized and decoded one at a time (`documents`), and a page as PNG as the pipeline sees it
(`page_png`). Imports nothing of serving/ but its config and errors: CPU workers, the jobs and
`ocr-batch` all decode with it."""
