"""Job documents read page by page: multi-frame images give one page per frame."""

from __future__ import annotations

import io
from dataclasses import replace as dataclass_replace

import numpy as np
import pytest
from PIL import Image

from serving.decode.documents import count_pages, decode_page, page_sizes, stage_document
from serving.decode.readers import DecodeLimits
from serving.errors import InvalidInput
from tests import images
from tests.pages import read_pages

LIMITS = DecodeLimits(max_pdf_pages=2, pdf_render_scale=2.0, max_image_pixels=10_000_000)
COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]  # RGB


def tiff(frames: int) -> bytes:
    pages = [Image.new("RGB", (40, 30), COLOURS[i % 3]) for i in range(frames)]
    buf = io.BytesIO()
    pages[0].save(buf, format="TIFF", save_all=True, append_images=pages[1:])
    return buf.getvalue()


def test_multi_frame_tiff_is_one_page_per_frame_in_jobs(tmp_path) -> None:
    data = tiff(3)
    path = tmp_path / "scan.tiff"
    path.write_bytes(data)
    assert count_pages(path, "image") == 3
    for index, (r, g, b) in enumerate(COLOURS):
        page = decode_page(path, "image", index, LIMITS)
        assert page.shape == (30, 40, 3)
        assert page[0, 0].tolist() == [b, g, r]  # BGR
    # Pages are counted from 0 in messages as in the API (`/v1/render?page=3`).
    with pytest.raises(InvalidInput, match=r"^There is no page 3: the image has pages 0 to 2 \("):
        decode_page(path, "image", 3, LIMITS)
    # A request is capped by input.max_pdf_pages (2 here); a job reads frame by frame instead.
    with pytest.raises(InvalidInput, match="max_pdf_pages"):
        read_pages(data, "image", LIMITS)


def test_single_images_and_pdfs() -> None:
    png = images.encode_png(images.latin_lines().image)
    assert count_pages(png, "image") == 1
    assert np.array_equal(decode_page(png, "image", 0, LIMITS), images.latin_lines().image)
    with pytest.raises(InvalidInput):
        decode_page(png, "image", 1, LIMITS)
    pdf = images.make_pdf([images.empty_page(100, 80)] * 2, dpi=144.0)
    assert count_pages(pdf, "pdf") == 2
    assert decode_page(pdf, "pdf", 1, LIMITS).shape == (80, 100, 3)


def _tiff_of_sizes(sizes: list[tuple[int, int]]) -> bytes:
    pages = [Image.new("RGB", size, COLOURS[i % 3]) for i, size in enumerate(sizes)]
    buf = io.BytesIO()
    pages[0].save(buf, format="TIFF", save_all=True, append_images=pages[1:])
    return buf.getvalue()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (images.encode_png(images.latin_lines().image), "image"),
        (images.encode_jpeg(images.chinese_lines().image), "image"),
        (_tiff_of_sizes([(40, 30), (17, 91)]), "image"),
        (images.make_pdf([images.empty_page(100, 80), images.empty_page(37, 211)]), "pdf"),
    ],
)
def test_page_sizes_from_headers_are_the_decoded_sizes(data: bytes, kind: str) -> None:
    """The memory budget charges `page_sizes` before decoding: it must be what decoding gives."""
    sizes = page_sizes(data, kind, LIMITS)  # type: ignore[arg-type]
    decoded = [decode_page(data, kind, i, LIMITS) for i in range(len(sizes))]  # type: ignore[arg-type]
    assert sizes == [(page.shape[1], page.shape[0]) for page in decoded]
    assert page_sizes(data, kind, LIMITS, index=len(sizes) - 1) == sizes[-1:]  # type: ignore[arg-type]


def test_page_sizes_refuse_before_decoding() -> None:
    big = images.make_pdf([images.empty_page(100, 80)] * 3)
    with pytest.raises(InvalidInput, match="max_pdf_pages"):
        page_sizes(big, "pdf", LIMITS)
    assert page_sizes(big, "pdf", LIMITS, index=2) == [page_sizes(big, "pdf", LIMITS, index=0)[0]]
    with pytest.raises(InvalidInput, match=r"^There is no page 3: the PDF has pages 0 to 2 \("):
        page_sizes(big, "pdf", LIMITS, index=3)
    with pytest.raises(InvalidInput, match=r"^There is no page 5: the PDF has pages 0 to 2 \("):
        decode_page(big, "pdf", 5, LIMITS)
    png = images.encode_png(images.latin_lines().image)
    with pytest.raises(InvalidInput, match="no page 1: the image has page 0 only"):
        page_sizes(png, "image", LIMITS, index=1)
    tiny = DecodeLimits(max_pdf_pages=2, pdf_render_scale=2.0, max_image_pixels=1000)
    with pytest.raises(InvalidInput, match="max_image_pixels"):
        page_sizes(big, "pdf", tiny, index=0)
    with pytest.raises(InvalidInput, match="max_image_pixels"):
        page_sizes(_tiff_of_sizes([(10, 10), (40, 30)]), "image", tiny)


def gif(frames: int) -> bytes:
    # Frames differ, and each is drawn over the last (GIF disposal 1): decoding frame i needs i-1.
    rng = np.random.default_rng(0)
    pages = [
        Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).convert("P")
        for _ in range(frames)
    ]
    buf = io.BytesIO()
    pages[0].save(buf, format="GIF", save_all=True, append_images=pages[1:], disposal=1)
    return buf.getvalue()


class FrameLoads:
    """Counts GIF frames decoded in this process (each `load` of a frame ends in `load_end`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from PIL import GifImagePlugin

        self.count = 0
        real = GifImagePlugin.GifImageFile.load_end

        def load_end(image: GifImagePlugin.GifImageFile) -> None:
            self.count += 1
            real(image)

        monkeypatch.setattr(GifImagePlugin.GifImageFile, "load_end", load_end)


def test_a_jobs_animated_gif_is_decoded_once_per_frame(tmp_path, monkeypatch) -> None:
    frames = 30
    data = gif(frames)
    path = tmp_path / "anim.gif"
    path.write_bytes(data)
    limits = LIMITS
    expected = read_pages(data, "image", dataclass_replace(limits, max_pdf_pages=frames))
    loads = FrameLoads(monkeypatch)
    assert stage_document(str(path), "image", limits) == frames
    staged = loads.count
    assert staged == frames  # one pass at staging
    assert count_pages(path, "image") == frames
    for index in range(frames):  # as a job reads it: each page sized, then decoded, alone
        assert page_sizes(path, "image", limits, index=index) == [(16, 12)]
        np.testing.assert_array_equal(decode_page(path, "image", index, limits), expected[index])
    assert loads.count == staged  # no GIF frame decoded again


def test_gif_frames_read_alone_decode_every_frame_before_them(tmp_path, monkeypatch) -> None:
    # What staging saves: the same pages read from the GIF itself cost 1 + 2 + ... + n decodes.
    frames = 10
    path = tmp_path / "anim.gif"
    path.write_bytes(gif(frames))
    loads = FrameLoads(monkeypatch)
    for index in range(frames):
        decode_page(path, "image", index, LIMITS)
    assert loads.count >= frames * (frames + 1) // 2


def test_staging_refuses_a_document_over_the_frame_cap(tmp_path) -> None:
    path = tmp_path / "anim.gif"
    path.write_bytes(gif(4))
    limits = dataclass_replace(LIMITS, max_frames_per_document=3)
    with pytest.raises(InvalidInput, match=r"input\.max_frames_per_document"):
        stage_document(str(path), "image", limits)
    assert path.read_bytes() == gif(4)  # left as it was


def test_staging_leaves_still_images_and_tiffs_as_they_are(tmp_path) -> None:
    for name, data in (("scan.tiff", tiff(3)), ("one.gif", gif(1))):
        path = tmp_path / name
        path.write_bytes(data)
        assert stage_document(str(path), "image", LIMITS) == count_pages(data, "image")
        assert path.read_bytes() == data
