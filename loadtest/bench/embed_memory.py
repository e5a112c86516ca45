"""What embedding an image upload in a searchable PDF holds, per pixel of the image as sent
(issue 49, item 6: `serving.outputs.service.EMBED_BYTES_PER_PX`).

`ocr-bench embed-memory --side 4000` writes a PNG and a JPEG of that side (noise
in 8-pixel runs, which compresses about as a scan does), then, in a fresh process for each, has
`serving.outputs.pdf` render a one-page searchable PDF of it and prints one JSON line: the
format, the upload's bytes, the output's, and the process's peak RSS growth over its size before
the render, in bytes a pixel (`python -m loadtest.bench.embed_memory FORMAT SIDE PATH` is that
process).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register

FORMATS = {
    "png": ("PNG", "image/png", {"compress_level": 1}),
    "jpeg": ("JPEG", "image/jpeg", {"quality": 90}),
}


def _write(path: Path, side: int, fmt: str) -> None:
    rng = np.random.default_rng(0)
    runs = rng.integers(0, 256, (side, side // 8, 3), dtype=np.uint8).repeat(8, axis=1)
    name, _, options = FORMATS[fmt]
    Image.fromarray(runs).save(path, format=name, **options)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure(path: Path, fmt: str, side: int) -> dict[str, object]:
    """Render `path` (an image of `side` x `side`) as a searchable PDF in this process."""
    from serving.outputs.document import Document, Page, Source
    from serving.outputs.formats import render_bytes

    data = path.read_bytes()
    document = Document(
        name=path.name,
        pages=(Page(width=side, height=side, blocks=()),),
        source=Source(FORMATS[fmt][1], data),
    )
    before = _rss_bytes()
    output = render_bytes(document, "pdf")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "format": fmt,
        "side": side,
        "upload_bytes": len(data),
        "output_bytes": len(output),
        "peak_bytes_per_px": round((peak - before) / side / side, 2),
    }


@register
class EmbedMemory(Scenario):
    """A searchable PDF's peak memory a pixel of the image embedded."""

    name = "embed-memory"
    help = "peak memory a pixel of embedding an image upload in a searchable PDF, PNG and JPEG"
    shared = ("out",)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """--side."""
        parser.add_argument("--side", type=int, default=4000, help="the image's side in pixels")

    def run(self, args: argparse.Namespace) -> Results:
        """Each format in a process of its own (peak RSS is the process's)."""
        rows = []
        with tempfile.TemporaryDirectory() as folder:
            for fmt in sorted(FORMATS):
                path = Path(folder) / f"upload.{fmt}"
                _write(path, args.side, fmt)
                command = [sys.executable, "-m", "loadtest.bench.embed_memory"]
                command += [fmt, str(args.side), str(path)]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        lines = [
            "| format | side | upload bytes | PDF bytes | peak bytes a pixel |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['format']} | {r['side']} | {r['upload_bytes']} | {r['output_bytes']} | "
            f"{r['peak_bytes_per_px']} |"
            for r in rows
        ]
        return Results(data={"rows": rows}, markdown="\n".join(lines) + "\n")


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[3]), sys.argv[1], int(sys.argv[2]))))
